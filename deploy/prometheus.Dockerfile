# Debian's prometheus, on the locally built base image (deploy/base-image.sh):
# no registry is needed.
FROM debian:bookworm-slim
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update -q \
 && apt-get install -y -q --no-install-recommends prometheus \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /prometheus
ENTRYPOINT ["/usr/bin/prometheus"]
