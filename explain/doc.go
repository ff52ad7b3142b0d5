// Package explain replays a RoCE v2 capture through a model of both ends
// of every connection in it and says, packet by packet, what each packet
// is, what it does to the receiver's state and, when something goes
// wrong, which rule of the InfiniBand transport applies.
package explain
