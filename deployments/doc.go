// Package deployments holds the container image, the Kubernetes manifests (a
// kustomize base) and the local compose file of outbox-bridge; see README.md.
// It has no Go code of its own: its tests render and strictly decode those
// files, and check them against the bridge's configuration rules.
package deployments
