"""Cairn's services: master, scheduler, searcher, checkpoint and agent, one package each."""
