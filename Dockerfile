# The sidecar image used by charts/taskstate: `docker build -t taskstate:0.1.0 .`
# Non-root, read-only root filesystem friendly (writes nothing but its socket and /tmp).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY requirements/ requirements/
COPY client/ client/
COPY sidecar/ sidecar/
COPY spark_plugin/ spark_plugin/
COPY demo/ demo/
COPY proto/ proto/
COPY cli/ cli/
COPY testing/ testing/
RUN python -m pip install --no-cache-dir --upgrade pip \
 && python -m pip wheel --no-cache-dir -c requirements/constraints.txt -w /wheels .

FROM python:3.11-slim
RUN groupadd --gid 10001 taskstate \
 && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin taskstate
COPY --from=build /wheels /wheels
RUN python -m pip install --no-cache-dir --no-index --find-links /wheels taskstate \
 && rm -rf /wheels
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 10001:10001
EXPOSE 9464
HEALTHCHECK --interval=10s --timeout=7s --start-period=20s \
  CMD ["taskstate", "health", "--sidecar", "unix:///var/run/taskstate/sidecar.sock"]
ENTRYPOINT ["taskstate"]
CMD ["sidecar", "--listen", "unix:///var/run/taskstate/sidecar.sock"]
