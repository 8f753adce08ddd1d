# One image for the web and worker processes (and the simulated engines).
FROM python:3.11-slim
WORKDIR /app
ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml README.md ./
COPY controlplane ./controlplane
COPY workers ./workers
COPY inference ./inference
COPY templates ./templates
COPY manage.py ./
# The CPU build of torch first, so the project install finds it satisfied.
RUN pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
    && pip install --no-cache-dir -e .
EXPOSE 8000
