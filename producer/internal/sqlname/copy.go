// This package is the producer module's copy of the relay's
// internal/sqlname: a module cannot import another module's internal
// packages, and the producer must accept exactly the tables the relay
// accepts. internal/sqlname's TestProducerCopyIsIdentical keeps
// sqlname.go and sqlname_test.go the same as the relay's: change both.

package sqlname
