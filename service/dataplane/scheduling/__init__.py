"""The scheduling policies (see service.dataplane.scheduler, which chooses one)."""
