module github.com/rosettamq/rosetta

go 1.26.0

require (
	go.etcd.io/bbolt v1.5.0
	golang.org/x/sys v0.50.0
)
