package main

// gorxe devinfo: rdma-core's ibv_devinfo (libibverbs/examples/devinfo.c)
// for the gorxe device the link flags open, in its format.

import (
	"cmp"
	"fmt"
	"io"
	"strings"

	"github.com/gorxe/gorxe/internal/getopt"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire"
)

type devinfoRun struct {
	link    linkFlags
	name    string // -d
	port    int    // -i, 0 for all
	list    bool   // -l
	verbose bool   // -v
	help    bool
}

type devinfoOption = toolOption[devinfoRun]

func devinfoOptions() []devinfoOption {
	const (
		no  = getopt.NoArg
		req = getopt.RequiredArg
	)
	opts := []devinfoOption{
		{'d', "ib-dev", req, honoured, false, "the device's name (gorxe0): gorxe has the one device its link flags open", setString(func(r *devinfoRun) *string { return &r.name })},
		{'i', "ib-port", req, honoured, false, "the port to print (1, the device's only one)", setInt(func(r *devinfoRun) *int { return &r.port })},
		{'l', "list", no, honoured, false, "print only the device's name", setTrue(func(r *devinfoRun) *bool { return &r.list })},
		{'v', "verbose", no, honoured, false, "print all the device's attributes, its GIDs too", setTrue(func(r *devinfoRun) *bool { return &r.verbose })},
		{'h', "help", no, honoured, true, "print this help", setTrue(func(r *devinfoRun) *bool { return &r.help })},
	}
	return append(opts, linkOptions(func(r *devinfoRun) *linkFlags { return &r.link },
		"the link whose device to print: udp (the default), tap or xdp",
		"the device's address, ADDR or ADDR/PREFIX (udp default: the source of the default route)")...)
}

// runDevinfo is "gorxe devinfo": ibv_devinfo of the device the link flags
// open (also "gorxe ibv_devinfo").
func runDevinfo(args []string, stdout, stderr io.Writer) int {
	return withDevice("devinfo", args, stdout, stderr, func(r *devinfoRun, dev *rnic.Device) int {
		if r.list {
			fmt.Fprintf(stdout, "1 HCA found:\n\t%s\n", dev.Name())
			return exitOK
		}
		if r.port != 0 && r.port != 1 {
			fmt.Fprintln(stderr, "Invalid port requested for device")
			return exitError
		}
		printDevinfo(stdout, dev, r.verbose)
		return exitOK
	})
}

// runDevices is "gorxe devices": rdma-core's ibv_devices, the device's
// name and node GUID (also "gorxe ibv_devices").
func runDevices(args []string, stdout, stderr io.Writer) int {
	return withDevice("devices", args, stdout, stderr, func(_ *devinfoRun, dev *rnic.Device) int {
		fmt.Fprintf(stdout, "    %-16s\t   node GUID\n", "device")
		fmt.Fprintf(stdout, "    %-16s\t----------------\n", "------")
		fmt.Fprintf(stdout, "    %-16s\t%016x\n", dev.Name(), dev.NodeGUID())
		return exitOK
	})
}

// withDevice parses the command line of devinfo or devices, opens the
// device its link flags describe, and runs fn on it.
func withDevice(tool string, args []string, stdout, stderr io.Writer, fn func(*devinfoRun, *rnic.Device) int) int {
	name := "gorxe " + tool
	r := &devinfoRun{link: linkFlags{port: wire.UDPPort}}
	operands, err := parseOptions(devinfoOptions(), r, args, false)
	if err == nil && len(operands) > 0 {
		err = fmt.Errorf("unexpected operands %q", operands)
	}
	if err != nil {
		return badCommandLine(stderr, name, err)
	}
	if r.help {
		fmt.Fprintf(stdout, "Usage: gorxe %s [options]\n\nrdma-core's ibv_%s for the gorxe device the link flags open.\n\n", tool, tool)
		printOptions(stdout, devinfoOptions(), "ibv_"+tool)
		return exitOK
	}
	r.link.kind = cmp.Or(r.link.kind, "udp")
	if r.link.kind == "mem" {
		return badCommandLine(stderr, name, fmt.Errorf("--link mem: a mem device lives inside one process: use --link udp, tap or xdp"))
	}
	if r.link.kind == "udp" && r.link.ip == "" {
		a, err := routeSource("192.0.2.1") // any address off the host: the default route's
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v: give the device's address with --ip\n", name, err)
			return exitError
		}
		r.link.ip = a.String()
	}
	r.link.log = stderr
	dev, err := r.link.openDevice(rnic.Config{Name: r.name})
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitError
	}
	defer dev.Close()
	return fn(r, dev)
}

// printDevinfo prints dev's attributes as ibv_devinfo prints a device's.
// Of the extended attributes (ibv_query_device_ex) it prints those gorxe
// has none of, as one line each; gorxe has no ODP, TSO, RSS, packet
// pacing, tag matching or CQ moderation, whose blocks it leaves out.
func printDevinfo(w io.Writer, dev *rnic.Device, verbose bool) {
	a := dev.Query()
	p := dev.QueryPort()
	// field prints "name:" after depth tabs and its value at
	// ibv_devinfo's column, the tab stop at 40 for the device's
	// attributes and 48 for the port's.
	field := func(depth int, name string, format string, v ...any) {
		stop := 40
		if depth > 1 {
			stop = 48
		}
		tabs := (stop - (8*depth + len(name) + 1) + 7) / 8
		fmt.Fprintf(w, "%s%s:%s"+format+"\n", append([]any{strings.Repeat("\t", depth), name, strings.Repeat("\t", tabs)}, v...)...)
	}
	guid := func(g uint64) string {
		return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48&0xffff, g>>32&0xffff, g>>16&0xffff, g&0xffff)
	}
	fmt.Fprintf(w, "hca_id:\t%s\n", dev.Name())
	field(1, "transport", "InfiniBand (0)")
	field(1, "node_guid", "%s", guid(a.NodeGUID))
	field(1, "sys_image_guid", "%s", guid(a.SysImageGUID))
	field(1, "vendor_id", "0x%04x", a.VendorID)
	field(1, "vendor_part_id", "%d", a.VendorPartID)
	field(1, "hw_ver", "0x%X", a.HWVer)
	field(1, "phys_port_cnt", "%d", a.PhysPortCnt)
	if verbose {
		field(1, "max_mr_size", "0x%x", a.MaxMRSize)
		field(1, "page_size_cap", "0x%x", a.PageSizeCap)
		field(1, "max_qp", "%d", a.MaxQP)
		field(1, "max_qp_wr", "%d", a.MaxQPWR)
		field(1, "device_cap_flags", "0x%08x", uint32(a.DeviceCapFlags))
		for _, f := range []struct {
			bit  rnic.DeviceCap
			name string
		}{
			{rnic.DeviceBadPKeyCntr, "BAD_PKEY_CNTR"}, {rnic.DeviceBadQKeyCntr, "BAD_QKEY_CNTR"},
			{rnic.DeviceSysImageGUID, "SYS_IMAGE_GUID"}, {rnic.DeviceRCRNRNAKGen, "RC_RNR_NAK_GEN"},
			{rnic.DeviceMemMgtExtensions, "MEM_MGT_EXTENSIONS"},
		} {
			if a.DeviceCapFlags&f.bit != 0 {
				fmt.Fprintf(w, "\t\t\t\t\t%s\n", f.name)
			}
		}
		atomic := map[rnic.AtomicCap]string{rnic.AtomicNone: "ATOMIC_NONE", rnic.AtomicHCA: "ATOMIC_HCA", rnic.AtomicGlob: "ATOMIC_GLOB"}
		for _, r := range []struct {
			name string
			v    int
		}{
			{"max_sge", a.MaxSGE}, {"max_sge_rd", a.MaxSGERd}, {"max_cq", a.MaxCQ}, {"max_cqe", a.MaxCQE},
			{"max_mr", a.MaxMR}, {"max_pd", a.MaxPD}, {"max_qp_rd_atom", a.MaxQPRdAtom}, {"max_ee_rd_atom", 0},
			{"max_res_rd_atom", a.MaxResRdAtom}, {"max_qp_init_rd_atom", a.MaxQPInitRdAtom}, {"max_ee_init_rd_atom", 0},
		} {
			field(1, r.name, "%d", r.v)
		}
		field(1, "atomic_cap", "%s (%d)", atomic[a.AtomicCap], a.AtomicCap)
		for _, r := range []struct {
			name string
			v    int
		}{
			{"max_ee", 0}, {"max_rdd", 0}, {"max_mw", 0}, {"max_raw_ipv6_qp", 0}, {"max_raw_ethy_qp", 0},
			{"max_mcast_grp", a.MaxMcastGrp}, {"max_mcast_qp_attach", a.MaxMcastQPAttach},
			{"max_total_mcast_qp_attach", a.MaxTotalMcastQPAttach}, {"max_ah", a.MaxAH}, {"max_fmr", 0},
			{"max_srq", a.MaxSRQ}, {"max_srq_wr", a.MaxSRQWR}, {"max_srq_sge", a.MaxSRQSGE},
			{"max_pkeys", a.MaxPKeys}, {"local_ca_ack_delay", a.LocalCAAckDelay},
		} {
			field(1, r.name, "%d", r.v)
		}
		fmt.Fprintf(w, "\tcompletion_timestamp_mask not supported\n")
		fmt.Fprintf(w, "\tcore clock not supported\n")
		field(1, "device_cap_flags_ex", "0x%X", uint64(a.DeviceCapFlags))
		field(1, "max_wq_type_rq", "0")
		field(1, "num_comp_vectors", "1")
	}
	fmt.Fprintf(w, "\t\tport:\t1\n")
	field(3, "state", "PORT_ACTIVE (%d)", p.State)
	field(3, "max_mtu", "%d (%d)", p.MaxMTU.Bytes(), p.MaxMTU)
	field(3, "active_mtu", "%d (%d)", p.ActiveMTU.Bytes(), p.ActiveMTU)
	field(3, "sm_lid", "0")
	field(3, "port_lid", "0")
	field(3, "port_lmc", "0x00")
	field(3, "link_layer", "Ethernet")
	if verbose {
		c := dev.Counters()
		field(3, "max_msg_sz", "0x%x", p.MaxMsgSz)
		field(3, "port_cap_flags", "0x%08x", p.PortCapFlags)
		field(3, "port_cap_flags2", "0x0000")
		field(3, "max_vl_num", "1 (1)")
		field(3, "bad_pkey_cntr", "0x%x", c.PKeyViolations)
		field(3, "qkey_viol_cntr", "0x%x", c.QKeyViolations)
		field(3, "sm_sl", "0")
		field(3, "pkey_tbl_len", "%d", p.PKeyTblLen)
		field(3, "gid_tbl_len", "%d", p.GIDTblLen)
		field(3, "subnet_timeout", "0")
		field(3, "init_type_reply", "0")
		field(3, "active_width", "1X (%d)", p.ActiveWidth)
		field(3, "active_speed", "2.5 Gbps (%d)", p.ActiveSpeed)
		for i, g := range dev.GIDs() {
			field(3, fmt.Sprintf("GID[%3d]", i), "%s, RoCE v2", g)
		}
	}
	fmt.Fprintln(w)
}
