package udp

// Spill is the link's area for the part of joined datagrams that does not
// fit their buffers, nil when the socket does not join them.
func Spill(l *Link) []byte { return l.rx.spill }

// HeldFree is the buffers waiting for packets the link will hold.
func HeldFree(l *Link) [][]byte { return l.rx.held.free }

// InterfaceMTU is the MTU a link on addr takes by default.
var InterfaceMTU = interfaceMTU
