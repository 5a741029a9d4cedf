# The file-based catalog image, for users with Docker (this repository's own
# images are built in Go: see docs/installation.md). OPM_IMAGE is operator-registry's opm
# image from the registry you use, at the version pinned in hack/tools/opm:
#   docker build -f catalog.Dockerfile --build-arg OPM_IMAGE=<registry>/operator-framework/opm:v1.74.0 \
#     -t <registry>/database-operator/catalog:v0.2.0 .
ARG OPM_IMAGE
FROM ${OPM_IMAGE}
ENTRYPOINT ["/bin/opm"]
CMD ["serve", "/configs", "--cache-dir=/tmp/cache"]
ADD catalog /configs
# Pre-build the serving cache so the catalog pod starts fast.
RUN ["/bin/opm", "serve", "/configs", "--cache-dir=/tmp/cache", "--cache-only"]
LABEL operators.operatorframework.io.index.configs.v1=/configs
