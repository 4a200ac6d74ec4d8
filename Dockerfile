# The action's image: the CLI on Python 3.11 with git. It talks to the runner's Docker daemon
# through /var/run/docker.sock, which GitHub Actions (and act) mount into container actions.
FROM python:3.11-slim
RUN command -v git >/dev/null || (apt-get update && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/*)
# NVIDIA's perf_analyzer for the latency gate: the tritonclient 2.51.0 wheel's bin/perf_analyzer with
# libcudart from nvidia-cuda-runtime-cu12, pinned and hashed, in a prefix of its own (/opt/perf_analyzer,
# where the tool looks) so that it never touches the locked tritonclient below; libb64 from Debian.
COPY src/triton_release/models/latency/perf_analyzer.lock /opt/triton-release/
RUN apt-get update && apt-get install -y --no-install-recommends libb64-0d && rm -rf /var/lib/apt/lists/* \
    && pip install --no-cache-dir --no-deps --require-hashes --only-binary :all: --target /opt/perf_analyzer \
       -r /opt/triton-release/perf_analyzer.lock
# Dependencies first, in their own layer: a source change does not reinstall them. They come
# pinned and hashed from requirements.lock (`make lock` regenerates it from pyproject.toml).
COPY requirements.lock /opt/triton-release/
RUN pip install --no-cache-dir --no-deps --require-hashes --only-binary :all: -r /opt/triton-release/requirements.lock
COPY pyproject.toml README.md /opt/triton-release/
COPY src /opt/triton-release/src
RUN pip install --no-cache-dir --no-deps /opt/triton-release && git config --system --add safe.directory '*'
ENTRYPOINT ["triton-release"]
