"""`etrt`: the server's command line (offline check, deploy, infer, serve).

`check` runs the server's own ingest on local files, so a CI pipeline gets the verdict an upload
would get without a server; the other commands are thin clients of a running server's HTTP API.
"""
