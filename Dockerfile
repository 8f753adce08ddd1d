# One image for the web and worker processes (and the simulated engines).
# The dashboard's browser packages (uPlot) come from package-lock.json, installed by npm in a
# stage of their own: the Python image needs only their files, not Node.
FROM node:20-slim AS assets
WORKDIR /assets
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --loglevel=error

FROM python:3.11-slim
WORKDIR /app
ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml README.md ./
COPY controlplane ./controlplane
COPY workers ./workers
COPY inference ./inference
COPY pacer_cli ./pacer_cli
COPY configs ./configs
COPY templates ./templates
COPY manage.py ./
COPY --from=assets /assets/node_modules/uplot/dist/uPlot.iife.min.js /assets/node_modules/uplot/dist/uPlot.min.css ./controlplane/dashboard/static/dashboard/vendor/uplot/
# The CPU build of torch first, so the project install finds it satisfied.
RUN pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
    && pip install --no-cache-dir -e .
# With DEBUG off (the compose file's default), whitenoise serves these from STATIC_ROOT.
RUN DEBUG=true python manage.py collectstatic --no-input -v 0
EXPOSE 8000
