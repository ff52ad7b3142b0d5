module github.com/gorxe/gorxe

go 1.25.0

require (
	github.com/gopacket/gopacket v1.7.7
	golang.org/x/net v0.55.0
	golang.org/x/sys v0.45.0
)
