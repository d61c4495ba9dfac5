"""Triton's system and CUDA shared memory extensions: tensors a client on the same host leaves
in shared memory, named by region, offset and size instead of travelling in the request.

Fronts only parse the references (refs.py) and relay registrations; the engine process maps
the regions (system.py; CUDA ones through service/cuda.py), keeps the registry (regions.py),
binds inputs and writes outputs at their addresses (binding.py; a CUDA input goes to the native
host as a device_array.DeviceArray), and counts what it copied (metrics.py), since the engine
is what runs the programs.
"""
