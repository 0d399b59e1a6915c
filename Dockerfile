# KForge app image: the Streamlit app and the synthesis workers it starts, on a CUDA-capable PyTorch base.
#
#   docker build -t kforge .
#   docker run --gpus all -p 8501:8501 -v kforge-data:/data kforge          # then open http://localhost:8501
#
# Inside the container the app binds 0.0.0.0 (so the published port reaches it); outside, `-p 8501:8501` publishes
# it on every interface of the host: use `-p 127.0.0.1:8501:8501` to keep it local. The app starts processes that
# compile and run generated code: do not expose it to a network you do not trust.
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
# The runtime base has NVRTC (the CUDA target's default compiler) and Triton; KernelBench-style `load_inline`
# candidates need nvcc: build with --build-arg BASE_IMAGE=pytorch/pytorch:2.9.0-cuda12.8-cudnn9-devel.
ARG BASE_IMAGE=pytorch/pytorch:2.9.0-cuda12.8-cudnn9-runtime
FROM ${BASE_IMAGE}

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# g++: the CPU target's compiler (and Triton's launcher stubs); curl: the health check.
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ curl \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/kforge
COPY requirements.txt requirements-ray.txt ./
ARG WITH_RAY=1
# torch comes with the base image (a CUDA build); requirements.txt pins the CPU build the CI machines use.
RUN grep -vE '^\s*torch\s*([=<>~!]|$)' requirements.txt > /tmp/requirements-app.txt \
    && pip install -r /tmp/requirements-app.txt \
    && if [ "$WITH_RAY" = "1" ]; then pip install -r requirements-ray.txt; fi \
    && rm /tmp/requirements-app.txt

RUN useradd --create-home --uid 1000 --shell /usr/sbin/nologin kforge \
    && mkdir -p /data \
    && chown kforge:kforge /data
COPY --chown=kforge:kforge . .

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

CMD ["python", "-m", "streamlit", "run", "app/main.py", "--server.address=0.0.0.0", "--server.port=8501", \
     "--server.headless=true", "--browser.gatherUsageStats=false"]
