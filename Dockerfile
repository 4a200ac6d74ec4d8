# The action's image: the CLI on Python 3.11 with git. It talks to the runner's Docker daemon
# through /var/run/docker.sock, which GitHub Actions (and act) mount into container actions.
FROM python:3.11-slim
RUN command -v git >/dev/null || (apt-get update && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/*)
# Dependencies first, in their own layer: a source change does not reinstall them.
COPY pyproject.toml /opt/triton-release/
RUN python3 -c "import tomllib; print('\n'.join(tomllib.load(open('/opt/triton-release/pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt && rm /tmp/requirements.txt
COPY README.md /opt/triton-release/
COPY src /opt/triton-release/src
RUN pip install --no-cache-dir --no-deps /opt/triton-release && git config --system --add safe.directory '*'
ENTRYPOINT ["triton-release"]
