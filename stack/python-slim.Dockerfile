# Stand-in for python:3.11-slim where it cannot be pulled: Debian 12's Python 3.11 with pip,
# answering to `python` and `pip install` as the official image does.
ARG BASE
FROM ${BASE}
COPY host-ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
RUN ln -sf /usr/bin/python3 /usr/local/bin/python && ln -sf /usr/bin/pip3 /usr/local/bin/pip
ENV PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore LANG=C.UTF-8
CMD ["python3"]
