package main

// gorxe devinfo: rdma-core's ibv_devinfo (libibverbs/examples/devinfo.c)
// for the gorxe device the link flags open, in its format.

import (
	"cmp"
	"fmt"
	"io"

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
	guid := func(g uint64) string {
		return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48&0xffff, g>>32&0xffff, g>>16&0xffff, g&0xffff)
	}
	fmt.Fprintf(w, "hca_id:\t%s\n", dev.Name())
	fmt.Fprintf(w, "\ttransport:\t\t\tInfiniBand (0)\n")
	fmt.Fprintf(w, "\tnode_guid:\t\t\t%s\n", guid(a.NodeGUID))
	fmt.Fprintf(w, "\tsys_image_guid:\t\t\t%s\n", guid(a.SysImageGUID))
	fmt.Fprintf(w, "\tvendor_id:\t\t\t0x%04x\n", a.VendorID)
	fmt.Fprintf(w, "\tvendor_part_id:\t\t\t%d\n", a.VendorPartID)
	fmt.Fprintf(w, "\thw_ver:\t\t\t\t0x%X\n", a.HWVer)
	fmt.Fprintf(w, "\tphys_port_cnt:\t\t\t%d\n", a.PhysPortCnt)
	if verbose {
		rows := []struct {
			name string
			tabs string
			v    any
		}{
			{"max_mr_size", "\t\t\t", fmt.Sprintf("0x%x", a.MaxMRSize)},
			{"page_size_cap", "\t\t\t", fmt.Sprintf("0x%x", a.PageSizeCap)},
			{"max_qp", "\t\t\t\t", a.MaxQP},
			{"max_qp_wr", "\t\t\t", a.MaxQPWR},
			{"device_cap_flags", "\t\t", fmt.Sprintf("0x%08x", uint32(a.DeviceCapFlags))},
		}
		for _, r := range rows {
			fmt.Fprintf(w, "\t%s:%s%v\n", r.name, r.tabs, r.v)
		}
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
		rows = []struct {
			name string
			tabs string
			v    any
		}{
			{"max_sge", "\t\t\t", a.MaxSGE}, {"max_sge_rd", "\t\t\t", a.MaxSGERd},
			{"max_cq", "\t\t\t\t", a.MaxCQ}, {"max_cqe", "\t\t\t", a.MaxCQE},
			{"max_mr", "\t\t\t\t", a.MaxMR}, {"max_pd", "\t\t\t\t", a.MaxPD},
			{"max_qp_rd_atom", "\t\t\t", a.MaxQPRdAtom}, {"max_ee_rd_atom", "\t\t\t", 0},
			{"max_res_rd_atom", "\t\t", a.MaxResRdAtom}, {"max_qp_init_rd_atom", "\t\t", a.MaxQPInitRdAtom},
			{"max_ee_init_rd_atom", "\t\t", 0},
			{"atomic_cap", "\t\t\t", fmt.Sprintf("%s (%d)", atomic[a.AtomicCap], a.AtomicCap)},
			{"max_ee", "\t\t\t\t", 0}, {"max_rdd", "\t\t\t", 0}, {"max_mw", "\t\t\t\t", 0},
			{"max_raw_ipv6_qp", "\t\t", 0}, {"max_raw_ethy_qp", "\t\t", 0},
			{"max_mcast_grp", "\t\t\t", a.MaxMcastGrp}, {"max_mcast_qp_attach", "\t\t", a.MaxMcastQPAttach},
			{"max_total_mcast_qp_attach", "\t", a.MaxTotalMcastQPAttach},
			{"max_ah", "\t\t\t\t", a.MaxAH}, {"max_fmr", "\t\t\t", 0},
			{"max_srq", "\t\t\t", a.MaxSRQ}, {"max_srq_wr", "\t\t\t", a.MaxSRQWR}, {"max_srq_sge", "\t\t\t", a.MaxSRQSGE},
			{"max_pkeys", "\t\t\t", a.MaxPKeys}, {"local_ca_ack_delay", "\t\t", a.LocalCAAckDelay},
		}
		for _, r := range rows {
			fmt.Fprintf(w, "\t%s:%s%v\n", r.name, r.tabs, r.v)
		}
		fmt.Fprintf(w, "\tcompletion_timestamp_mask not supported\n")
		fmt.Fprintf(w, "\tcore clock not supported\n")
		fmt.Fprintf(w, "\tdevice_cap_flags_ex:\t\t0x%X\n", uint64(a.DeviceCapFlags))
		fmt.Fprintf(w, "\tmax_wq_type_rq:\t\t\t0\n")
		fmt.Fprintf(w, "\tnum_comp_vectors:\t\t1\n")
	}
	fmt.Fprintf(w, "\t\tport:\t1\n")
	fmt.Fprintf(w, "\t\t\tstate:\t\t\tPORT_ACTIVE (%d)\n", p.State)
	fmt.Fprintf(w, "\t\t\tmax_mtu:\t\t%d (%d)\n", p.MaxMTU.Bytes(), p.MaxMTU)
	fmt.Fprintf(w, "\t\t\tactive_mtu:\t\t%d (%d)\n", p.ActiveMTU.Bytes(), p.ActiveMTU)
	fmt.Fprintf(w, "\t\t\tsm_lid:\t\t\t0\n")
	fmt.Fprintf(w, "\t\t\tport_lid:\t\t0\n")
	fmt.Fprintf(w, "\t\t\tport_lmc:\t\t0x00\n")
	fmt.Fprintf(w, "\t\t\tlink_layer:\t\tEthernet\n")
	if verbose {
		fmt.Fprintf(w, "\t\t\tmax_msg_sz:\t\t0x%x\n", p.MaxMsgSz)
		fmt.Fprintf(w, "\t\t\tport_cap_flags:\t\t0x%08x\n", p.PortCapFlags)
		fmt.Fprintf(w, "\t\t\tport_cap_flags2:\t0x0000\n")
		fmt.Fprintf(w, "\t\t\tmax_vl_num:\t\t1 (1)\n")
		c := dev.Counters()
		fmt.Fprintf(w, "\t\t\tbad_pkey_cntr:\t\t0x%x\n", c.PKeyViolations)
		fmt.Fprintf(w, "\t\t\tqkey_viol_cntr:\t\t0x%x\n", c.QKeyViolations)
		fmt.Fprintf(w, "\t\t\tsm_sl:\t\t\t0\n")
		fmt.Fprintf(w, "\t\t\tpkey_tbl_len:\t\t%d\n", p.PKeyTblLen)
		fmt.Fprintf(w, "\t\t\tgid_tbl_len:\t\t%d\n", p.GIDTblLen)
		fmt.Fprintf(w, "\t\t\tsubnet_timeout:\t\t0\n")
		fmt.Fprintf(w, "\t\t\tinit_type_reply:\t0\n")
		fmt.Fprintf(w, "\t\t\tactive_width:\t\t1X (%d)\n", p.ActiveWidth)
		fmt.Fprintf(w, "\t\t\tactive_speed:\t\t2.5 Gbps (%d)\n", p.ActiveSpeed)
		for i, g := range dev.GIDs() {
			fmt.Fprintf(w, "\t\t\tGID[%3d]:\t\t%s, RoCE v2\n", i, g)
		}
	}
	fmt.Fprintln(w)
}
