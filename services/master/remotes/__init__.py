"""Clients of the other Cairn services (searcher, scheduler, checkpoint). They turn gRPC failures into
domain errors so the domain never sees a status code."""
