# For users with Docker. CI builds no images here (no daemon on its machines).
FROM golang:1.27 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/
COPY helm-charts/ helm-charts/
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /manager ./cmd

# A static binary on an empty base, running as a non-root user.
FROM scratch
COPY --from=build /manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
