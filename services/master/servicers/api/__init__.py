"""The public Cairn service (cairn.api.v1.Cairn), one mixin per area."""
