"""Helm values of the add-ons, built by pure functions from the spec (no Pulumi here, so tests read them as data)."""
