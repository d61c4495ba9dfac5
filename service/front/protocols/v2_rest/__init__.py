"""The Open Inference Protocol (v2) over REST; `routes.install` mounts it. Kept empty so worker
processes can import the codec without the web framework and the dataplane."""
