# Stand-in for nvcr.io/nvidia/tritonserver:24.10-py3: Triton 2.51.0 from the nvidia-pytriton
# wheel on a Debian root file system, laid out as in NVIDIA's images.
ARG BASE
FROM ${BASE}
ARG STUB_PYTHON=3.11
COPY host-ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY opt/tritonserver /opt/tritonserver
COPY stubs/${STUB_PYTHON}/triton_python_backend_stub /opt/tritonserver/backends/python/triton_python_backend_stub
ENV PATH=/opt/tritonserver/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LD_LIBRARY_PATH=/opt/tritonserver/lib \
    TRITON_SERVER_VERSION=2.51.0 \
    NVIDIA_TRITON_SERVER_VERSION=24.10 \
    PIP_BREAK_SYSTEM_PACKAGES=1 \
    LANG=C.UTF-8
WORKDIR /opt/tritonserver
CMD ["tritonserver", "--model-repository=/models"]
