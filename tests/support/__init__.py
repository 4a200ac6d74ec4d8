"""Helpers the tests share, imported as `from support.<module> import ...` (pyproject puts tests/
on the path): model repositories from a few lines of data, git repositories, the released
workspace of the fault suite, the tool run in a process of its own, and registries (a real
docker-registry process and a loopback fake)."""
