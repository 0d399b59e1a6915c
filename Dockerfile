# KForge app image: the Streamlit app and the synthesis workers it starts, with the torch version everything is
# tested on (requirements.txt pins torch==2.13.0).
#
#   docker build -t kforge .
#   docker run --gpus all -p 127.0.0.1:8501:8501 -v kforge-data:/data kforge      # then open http://localhost:8501
#
# Inside the container the app binds 0.0.0.0 (so the published port reaches it); `-p 127.0.0.1:8501:8501` keeps it
# on the host's loopback. The app starts processes that compile and run generated code: do not expose it to a
# network you do not trust.
#
# The same image is a Ray worker node for `bench --cluster` (Ray comes from requirements-ray.txt; build with
# --build-arg WITH_RAY=0 to leave it out). On each GPU host, joining the head at HEAD (port 6379):
#
#   docker run -d --gpus all --network host --shm-size 8g --no-healthcheck -v kforge-data:/data kforge \
#       ray start --address=HEAD:6379 --block
#
# --network host: Ray's nodes connect to each other on many ports; --shm-size: Ray's object store lives in
# /dev/shm; --no-healthcheck: the health check below probes the app, which a worker does not serve. Each node keeps
# its own build and ceilings caches under /data, measured on its own devices.
#
# torch comes from PyPI, whose Linux wheel is the CUDA build: it brings NVRTC (the CUDA target's default compiler)
# and Triton, but not nvcc, so KernelBench-style `load_inline` CUDA candidates cannot build in this image (they get
# a compile_error). For nvcc, build on a CUDA devel image that has Python 3.11+, e.g.
#   --build-arg BASE_IMAGE=pytorch/pytorch:2.9.0-cuda12.8-cudnn9-devel      (torch is then upgraded to 2.13.0)
# For a CPU-only image (no GPU on the host; ~1 GB instead of several):
#   --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}
ARG TORCH_INDEX=""

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# g++: the CPU target's compiler (and Triton's launcher stubs); curl: the health check; tini: PID 1, which reaps the
# worker and evaluation processes the app starts (without an init, finished workers stay zombies).
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ curl tini \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/kforge
COPY requirements.txt requirements-ray.txt ./
ARG WITH_RAY=1
RUN if [ -n "$TORCH_INDEX" ]; then pip install --index-url "$TORCH_INDEX" torch==2.13.0; fi \
    && pip install -r requirements.txt \
    && if [ "$WITH_RAY" = "1" ]; then pip install -r requirements-ray.txt; fi

RUN useradd --create-home --uid 1000 --shell /usr/sbin/nologin kforge \
    && mkdir -p /data \
    && chown kforge:kforge /data
# The sources stay owned by root and read-only to the user that runs generated code: a candidate cannot rewrite the
# harness, the rules or the app. Everything the app writes goes to /data.
COPY . .
RUN chmod -R a-w,a+rX /opt/kforge

USER kforge
# Runs, worker logs, uploaded screenshots, build and ceilings caches, settings: all under the /data volume.
ENV HOME=/home/kforge \
    KFORGE_DB=/data/runs.db \
    KFORGE_CACHE_DIR=/data/cache \
    KFORGE_SETTINGS=/data/settings.toml
VOLUME ["/data"]
EXPOSE 8501

HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD curl -fsS http://127.0.0.1:8501/_stcore/health || exit 1

ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["python", "-m", "streamlit", "run", "app/main.py", "--server.address=0.0.0.0", "--server.port=8501", \
     "--server.headless=true", "--browser.gatherUsageStats=false"]
