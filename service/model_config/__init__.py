"""A model's configuration (Triton's names): parsed and checked once by ingest into typed records,
stored with the model, and read by attribute by the dataplane. It belongs to the model, not to
the upload, so it sits below both: ingest and the store write it, the dataplane reads it."""
