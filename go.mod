module github.com/gorxe/gorxe

go 1.25.0

require github.com/gopacket/gopacket v1.7.7 // indirect
