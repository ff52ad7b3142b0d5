package mr

import "github.com/gorxe/gorxe/internal/bitnames"

// Access is a set of memory region access rights, with the bit values of
// rdma-core's enum ibv_access_flags so that flags read from perftest or a
// verbs user mean the same thing here.
//
// Two kinds of access are distinguished:
//
//   - Local access is made by this host's own work requests through an lkey:
//     a send or RDMA WRITE gathers from local memory (a local read, which
//     every MR permits), a receive, an RDMA READ response or an atomic result
//     scatters into local memory (a local write, which needs LocalWrite).
//   - Remote access is made by the peer through an rkey, carried in a RETH or
//     AtomicETH: it needs RemoteRead, RemoteWrite or RemoteAtomic.
type Access uint32

// Access rights, with ibv_access_flags values (libibverbs/verbs.h).
const (
	// LocalWrite (IBV_ACCESS_LOCAL_WRITE) lets this host's receives, RDMA
	// READ responses and atomic results be written into the region.
	LocalWrite Access = 1 << 0
	// RemoteWrite (IBV_ACCESS_REMOTE_WRITE) lets the peer RDMA WRITE the
	// region through its rkey.
	RemoteWrite Access = 1 << 1
	// RemoteRead (IBV_ACCESS_REMOTE_READ) lets the peer RDMA READ the region
	// through its rkey.
	RemoteRead Access = 1 << 2
	// RemoteAtomic (IBV_ACCESS_REMOTE_ATOMIC) lets the peer perform
	// CmpSwap and FetchAdd on the region through its rkey.
	RemoteAtomic Access = 1 << 3
)

// LocalRead is the right a local read (the gather of a send, an RDMA WRITE
// or an RDMA READ request's local side) asks Lookup for: none. Every region
// can be read through its own lkey.
const LocalRead Access = 0

// RemoteAccess is the set of rights that only a remote peer exercises.
const RemoteAccess = RemoteWrite | RemoteRead | RemoteAtomic

// validAccess is every right this package understands; Register rejects
// other bits, as the kernel's ib_check_mr_access rejects unsupported ones.
const validAccess = LocalWrite | RemoteAccess

var accessNames = []bitnames.Name[Access]{
	{Bit: LocalWrite, Name: "LOCAL_WRITE"},
	{Bit: RemoteWrite, Name: "REMOTE_WRITE"},
	{Bit: RemoteRead, Name: "REMOTE_READ"},
	{Bit: RemoteAtomic, Name: "REMOTE_ATOMIC"},
}

// Remote reports whether a includes any right that only a remote peer
// exercises.
func (a Access) Remote() bool { return a&RemoteAccess != 0 }

// String returns the rights joined by "|" in bit order, like
// "LOCAL_WRITE|REMOTE_READ"; unknown bits are appended in hex and the empty
// set is "0".
func (a Access) String() string { return bitnames.String(a, accessNames) }
