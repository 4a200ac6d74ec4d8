# The action's image: the CLI on Python 3.11 with git. It talks to the runner's Docker daemon
# through /var/run/docker.sock, which GitHub Actions (and act) mount into container actions.
FROM python:3.11-slim
RUN command -v git >/dev/null || (apt-get update && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/*)
# Dependencies first, in their own layer: a source change does not reinstall them. They come
# pinned and hashed from requirements.lock (`make lock` regenerates it from pyproject.toml).
COPY requirements.lock /opt/triton-release/
RUN pip install --no-cache-dir --no-deps --require-hashes --only-binary :all: -r /opt/triton-release/requirements.lock
COPY pyproject.toml README.md /opt/triton-release/
COPY src /opt/triton-release/src
RUN pip install --no-cache-dir --no-deps /opt/triton-release && git config --system --add safe.directory '*'
ENTRYPOINT ["triton-release"]
