"""Scheduling control plane: cron/interval schedules, slots, the materializer."""
