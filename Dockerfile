FROM python:3.11-slim
WORKDIR /src
COPY pyproject.toml README.md ./
COPY poold ./poold
COPY api ./api
COPY drivers ./drivers
COPY migrations ./migrations
RUN pip install --no-cache-dir .
EXPOSE 7077
CMD ["poold", "serve", "--listen", "0.0.0.0:7077", "--emulate", "1GiB"]
