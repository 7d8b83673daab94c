# prescaler container image.
#   docker build -t prescaler:0.1.0 .
# Stage 1 builds a virtualenv with prescaler and its dependencies (wheels only, no compiler in the
# final image); stage 2 copies just that virtualenv onto a clean python:3.11-slim.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/prescaler
ENV PATH=/opt/prescaler/bin:$PATH
WORKDIR /src
# Dependencies first, from pyproject.toml alone, so code edits reuse this layer.
COPY pyproject.toml README.md* ./
RUN mkdir adapter && touch adapter/__init__.py \
    && pip install . \
    && pip uninstall -y prescaler
COPY adapter ./adapter
RUN pip install --no-deps . && prescaler --help >/dev/null

FROM python:3.11-slim
ENV PATH=/opt/prescaler/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/prescaler /opt/prescaler
# A fixed numeric non-root user (matches runAsUser in deploy/), so runAsNonRoot can verify it.
RUN groupadd --system --gid 65532 prescaler \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin prescaler
USER 65532:65532
# The server listens on 6443 (HTTPS) in a cluster; the root filesystem may be read-only (/tmp is an emptyDir).
EXPOSE 6443
ENTRYPOINT ["prescaler"]
CMD ["--help"]
