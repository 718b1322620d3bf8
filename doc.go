// Package bridge assembles the outbox relay with google/wire: wire.go
// declares the injectors (build tag wireinject) and the generated
// wire_gen.go implements them. cmd/bridge parses the command line, loads
// the configuration and calls an injector; everything else lives under
// internal/.
package bridge
