package xdp

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ethtoolCmd is struct ethtool_cmd (linux/ethtool.h), what ETHTOOL_GSET
// fills: the kernel still answers it from the driver's link settings.
type ethtoolCmd struct {
	cmd           uint32
	supported     uint32
	advertising   uint32
	speed         uint16 // Mb/s, low half
	duplex        uint8
	port          uint8
	phyAddress    uint8
	transceiver   uint8
	autoneg       uint8
	mdioSupport   uint8
	maxTxPkt      uint32
	maxRxPkt      uint32
	speedHi       uint16 // Mb/s, high half
	ethTpMdix     uint8
	ethTpMdixCtrl uint8
	lpAdvertising uint32
	reserved      [2]uint32
}

// ifreqData is struct ifreq with its union holding a pointer
// (ifr_data), as SIOCETHTOOL takes it.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte // the rest of the union
}

// speedUnknown is SPEED_UNKNOWN: a link that is down, or a driver that
// does not say.
const speedUnknown = 0xffffffff

// interfaceSpeed returns the interface's speed in bits per second, from
// the ethtool ioctl (sysfs's speed file shows the network namespace sysfs
// was mounted in, not the caller's), or 0 if the driver does not know it.
func interfaceSpeed(name string) (uint64, error) {
	if len(name) >= unix.IFNAMSIZ {
		return 0, fmt.Errorf("xdp: interface name %q too long", name)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("xdp: socket for ethtool: %w", err)
	}
	defer unix.Close(fd)
	cmd := ethtoolCmd{cmd: unix.ETHTOOL_GSET}
	var ifr ifreqData
	copy(ifr.name[:], name)
	ifr.data = unsafe.Pointer(&cmd)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); errno != 0 {
		return 0, fmt.Errorf("xdp: ethtool speed of %s: %w", name, errno)
	}
	mbps := uint32(cmd.speedHi)<<16 | uint32(cmd.speed)
	if mbps == 0 || mbps == speedUnknown {
		return 0, nil
	}
	return uint64(mbps) * 1_000_000, nil
}
