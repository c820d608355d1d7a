# The fragmentation-aware scheduler extender (scheduler/extender), built from this repository.
# Built and pushed by .github/workflows/extender-image.yml; the stack deploys it by a pinned tag.
# Only what the extender imports is installed: numpy (scores), kubernetes (watch), PyYAML, prometheus-client
# (/metrics).
FROM python:3.11.13-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY scheduler ./scheduler
RUN pip install "numpy>=2.0,<3" "pyyaml>=6" "kubernetes>=31,<37" "prometheus-client>=0.20,<1" \
    && pip install --no-deps . \
    && rm -rf scheduler
USER 65532:65532
EXPOSE 8888
ENTRYPOINT ["python", "-m", "scheduler.extender"]
