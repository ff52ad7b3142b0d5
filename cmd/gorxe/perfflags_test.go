package main

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/congestion"
	"github.com/gorxe/gorxe/internal/getopt"
	"github.com/gorxe/gorxe/perftest"
)

// perfSummary renders what a parsed command line sets, apart from the
// defaults, as sorted "name=value" words: the parameters a test's run
// takes from it.
func perfSummary(r *perfRun) string {
	def, _ := parsePerf(r.test, nil)
	var out []string
	add := func(name string, got, want any) {
		if !reflect.DeepEqual(got, want) {
			out = append(out, fmt.Sprintf("%s=%v", name, got))
		}
	}
	add("server", r.server, def.server)
	add("link", r.link.kind, def.link.kind)
	add("ip", r.link.ip, def.link.ip)
	add("roce-port", r.link.port, def.link.port)
	add("tcp-port", r.tcpPort, def.tcpPort)
	add("dev", r.device, def.device)
	add("ib-port", r.ibPort, def.ibPort)
	add("gid", r.gidIndex, def.gidIndex)
	add("ipv6", r.ipv6, def.ipv6)
	add("bind", r.bindIP, def.bindIP)
	add("mtu", r.mtu, def.mtu)
	add("connection", r.p.ConnectionName(), def.p.ConnectionName())
	add("timeout", r.timeout, def.timeout)
	add("size", r.p.Size, def.p.Size)
	add("iters", r.p.Iters, def.p.Iters)
	add("all", r.p.AllSize, def.p.AllSize)
	add("tx", r.p.TxDepth, def.p.TxDepth)
	add("rx", r.p.RxDepth, def.p.RxDepth)
	add("cqmod", r.p.CQMod, def.p.CQMod)
	add("atomic", r.p.Atomic, def.p.Atomic)
	add("events", r.p.Events, def.p.Events)
	add("check", r.p.Check, def.p.Check)
	add("json", r.json, def.json)
	add("window", r.p.Window, def.p.Window)
	add("give-up", r.p.GiveUp, def.p.GiveUp)
	add("qps", r.p.NumQPs, def.p.NumQPs)
	add("duplex", r.p.Duplex, def.p.Duplex)
	add("outs", r.p.OutReads, def.p.OutReads)
	add("imm", r.p.WithImm, def.p.WithImm)
	add("rdma-cm", r.p.RDMACM, def.p.RDMACM)
	add("comm-rdma-cm", r.p.CommRDMACM, def.p.CommRDMACM)
	add("mr-per-qp", r.p.MRPerQP, def.p.MRPerQP)
	add("D", r.p.Duration, def.p.Duration)
	add("margin", r.p.Margin, def.p.Margin)
	add("infinite", r.p.Infinite, def.p.Infinite)
	add("warm-up", r.p.WarmUp, def.p.WarmUp)
	add("no-peak", r.p.NoPeak, def.p.NoPeak)
	add("gbits", r.p.ReportGbits, def.p.ReportGbits)
	add("hist", r.p.Histogram, def.p.Histogram)
	add("unsorted", r.p.Unsorted, def.p.Unsorted)
	add("cycles", r.p.Cycles, def.p.Cycles)
	add("inline", r.p.Inline, def.p.Inline)
	add("post-list", r.p.PostList, def.p.PostList)
	add("tclass", r.p.TrafficClass, def.p.TrafficClass)
	add("flow-label", fmt.Sprint(r.p.FlowLabels), fmt.Sprint(def.p.FlowLabels))
	add("wait-destroy", r.waitDestroy, def.waitDestroy)
	add("out-json", r.outJSON, def.outJSON)
	add("out-json-file", r.outJSONFile, def.outJSONFile)
	add("output", r.output, def.output)
	add("cc", r.p.CC, def.p.CC)
	add("cc-profile", r.link.ccProfile, def.link.ccProfile)
	add("line-rate", r.p.LineRate, def.p.LineRate)
	add("pacing-burst", r.p.PacingBurst, def.p.PacingBurst)
	if r.p.CC != r.link.cc || r.p.CCParams != r.link.ccParams || r.p.LineRate != r.link.lineRate || r.p.PacingBurst != r.link.burst {
		out = append(out, "cc-not-in-params")
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// Command lines shaped as people publish them (perftest's docs, rxe
// tutorials, test scripts, issue threads), each with the parameters it
// must give.
var perfCommandLines = []struct {
	test perftest.Test
	args string
	want string
}{
	// Server and client, the device named as the host's.
	{perftest.WriteBW, "-d rxe0", "dev=rxe0"},
	{perftest.WriteBW, "-d rxe0 10.0.0.1", "dev=rxe0 server=10.0.0.1"},
	{perftest.WriteBW, "-d mlx5_0 -F --report_gbits", "dev=mlx5_0 gbits=true"},
	{perftest.WriteBW, "-d mlx5_0 -i 1 -F 192.168.1.10", "dev=mlx5_0 server=192.168.1.10"},
	{perftest.WriteBW, "-d rxe0 -x 1 -F", "dev=rxe0 gid=1"},
	{perftest.WriteBW, "-d rxe0 -x 1 -F 10.9.0.1", "dev=rxe0 gid=1 server=10.9.0.1"},
	{perftest.WriteBW, "-d rxe0 -x 3 -s 65536 -n 1000", "dev=rxe0 gid=3 iters=1000 size=65536"},
	{perftest.WriteBW, "-a -d rxe0", "all=true dev=rxe0"},
	{perftest.WriteBW, "-a -F -d rxe0 server", "all=true dev=rxe0 server=server"},
	{perftest.WriteBW, "-aF -d rxe0", "all=true dev=rxe0"},
	{perftest.WriteBW, "-Fa", "all=true"},
	{perftest.WriteBW, "-s 4K", "size=4096"},
	{perftest.WriteBW, "-s 1M -n 100", "iters=100 size=1048576"},
	{perftest.WriteBW, "-s65536", "size=65536"},
	{perftest.WriteBW, "--size=65536", "size=65536"},
	{perftest.WriteBW, "--size 65536", "size=65536"},
	{perftest.WriteBW, "--size=4K --iters=5000", "iters=5000 size=4096"},
	{perftest.WriteBW, "-s 0x1000", "size=4096"},
	{perftest.WriteBW, "--siz 8", "size=8"},
	{perftest.WriteBW, "10.0.0.2 -d mlx5_0 -s 4096", "dev=mlx5_0 server=10.0.0.2 size=4096"},
	{perftest.WriteBW, "host1 -F -d rxe0 -x 1", "dev=rxe0 gid=1 server=host1"},
	{perftest.WriteBW, "-d rxe0 host1 -n 20 -s 1024", "dev=rxe0 iters=20 server=host1 size=1024"},
	{perftest.WriteBW, "--ib-dev=rxe0 --ib-port=1 --gid-index=1", "dev=rxe0 gid=1"},
	{perftest.WriteBW, "--ib-dev rxe0 --gid-index 1 --mtu 4096", "dev=rxe0 gid=1 mtu=4096"},
	{perftest.WriteBW, "-m 4096 -d rxe0", "dev=rxe0 mtu=4096"},
	{perftest.WriteBW, "-m 2048", "mtu=2048"},
	{perftest.WriteBW, "-p 10000", "tcp-port=10000"},
	{perftest.WriteBW, "-p10000 clx-host-108", "server=clx-host-108 tcp-port=10000"},
	{perftest.WriteBW, "--port=20000 -d rxe0 10.0.0.5", "dev=rxe0 server=10.0.0.5 tcp-port=20000"},
	{perftest.WriteBW, "-t 64 -Q 10", "cqmod=10 tx=64"},
	{perftest.WriteBW, "--tx-depth=256 --cq-mod=1", "cqmod=1 tx=256"},
	{perftest.WriteBW, "-u 18", "timeout=18"},
	{perftest.WriteBW, "--qp-timeout 20", "timeout=20"},
	{perftest.WriteBW, "-c RC", ""},
	{perftest.WriteBW, "--connection=RC -d rxe0", "dev=rxe0"},
	{perftest.SendBW, "-c UC", "connection=UC"},
	{perftest.WriteBW, "-c UC -d rxe0", "connection=UC dev=rxe0"},
	{perftest.WriteLat, "--connection=UC", "connection=UC"},
	{perftest.SendLat, "-cUC", "connection=UC"},
	{perftest.WriteBW, "--ipv6 -d rxe0", "dev=rxe0 ipv6=true"},
	{perftest.WriteBW, "--ipv6-addr fd00::1", "server=fd00::1"},
	{perftest.WriteBW, "--bind_source_ip 10.0.0.1 10.0.0.2", "bind=10.0.0.1 server=10.0.0.2"},
	{perftest.WriteBW, "-d rxe0 -F -x 1 -S 3 10.0.0.2", "dev=rxe0 gid=1 server=10.0.0.2"},
	{perftest.WriteBW, "-d rxe0 --cpu_util -F", "dev=rxe0"},
	{perftest.WriteBW, "-d rxe0 -X 2 --use_hugepages", "dev=rxe0"},
	{perftest.WriteBW, "--numa_node=0 --disable_pcie_relaxed --no_lock --pin_cores 0-1 --disable_numa --no_enhanced_reorder 10.0.0.2", "server=10.0.0.2"},
	{perftest.WriteBW, "-d rxe0 -- 10.0.0.2", "dev=rxe0 server=10.0.0.2"},
	{perftest.WriteBW, "-n 5", "iters=5"},
	{perftest.ReadBW, "-d rxe0 -F", "dev=rxe0"},
	{perftest.ReadBW, "-d rxe0 -x 1 -s 65536 10.0.0.1", "dev=rxe0 gid=1 server=10.0.0.1 size=65536"},
	{perftest.ReadBW, "-a -d mlx5_1 -F 10.1.1.1", "all=true dev=mlx5_1 server=10.1.1.1"},
	{perftest.ReadBW, "-s 1K --iters 200 -m 1024", "iters=200 mtu=1024 size=1024"},
	{perftest.SendBW, "-d rxe0 -x 1 -a -F", "all=true dev=rxe0 gid=1"},
	{perftest.SendBW, "-d rxe0 -r 1024 -s 8192 10.0.0.1", "dev=rxe0 rx=1024 server=10.0.0.1 size=8192"},
	{perftest.SendBW, "--rx-depth=128 -e", "events=true rx=128"},
	{perftest.SendBW, "-e -d rxe0 host", "dev=rxe0 events=true server=host"},
	{perftest.SendBW, "-c RC -d rxe0 -s 1024 -n 100", "dev=rxe0 iters=100 size=1024"},
	{perftest.AtomicBW, "-d rxe0 -A CMP_AND_SWAP", "atomic=CMP_AND_SWAP dev=rxe0"},
	{perftest.AtomicBW, "--atomic_type=FETCH_AND_ADD -n 1000 10.0.0.3", "atomic=FETCH_AND_ADD iters=1000 server=10.0.0.3"},
	{perftest.WriteLat, "-d rxe0 -x 1 -F", "dev=rxe0 gid=1"},
	{perftest.WriteLat, "-a -d rxe0 -F 10.0.0.1", "all=true dev=rxe0 server=10.0.0.1"},
	{perftest.WriteLat, "-s 2 -n 10000 -d mlx5_0", "dev=mlx5_0 iters=10000 size=2"},
	{perftest.WriteLat, "10.0.0.1 -s 64 -d rxe0 -e", "dev=rxe0 events=true server=10.0.0.1 size=64"},
	{perftest.ReadLat, "-d rxe0 -F -s 8", "dev=rxe0 size=8"},
	{perftest.ReadLat, "-x 1 10.9.0.2", "gid=1 server=10.9.0.2"},
	{perftest.SendLat, "-d rxe0 -a -F", "all=true dev=rxe0"},
	{perftest.SendLat, "-d rxe0 -s 1024 -n 5000 10.0.0.1", "dev=rxe0 iters=5000 server=10.0.0.1 size=1024"},
	{perftest.WriteBW, "-q 2", "qps=2"},
	{perftest.WriteBW, "-d mlx5_0 -q 4 -b 10.0.0.2", "dev=mlx5_0 duplex=true qps=4 server=10.0.0.2"},
	{perftest.WriteBW, "--qp=8 --bidirectional", "duplex=true qps=8"},
	{perftest.SendBW, "-b -d rxe0 -x 1 -F", "dev=rxe0 duplex=true gid=1"},
	{perftest.ReadBW, "-o 4 -d rxe0", "dev=rxe0 outs=4"},
	{perftest.ReadBW, "--outs=16 -q 2 10.0.0.1", "outs=16 qps=2 server=10.0.0.1"},
	{perftest.WriteBW, "--write_with_imm -d rxe0", "dev=rxe0 imm=true"},
	{perftest.WriteLat, "--write_with_imm 10.0.0.1", "imm=true server=10.0.0.1"},
	{perftest.SendBW, "--send_with_imm", "imm=true"},
	{perftest.WriteBW, "-q 4 --mr_per_qp", "mr-per-qp=true qps=4"},
	{perftest.WriteBW, "-bq2", "duplex=true qps=2"},
	{perftest.WriteBW, "-d mlx5_3 -D 30 clx-host-108 -s 65536 -p 10000 -F --report_gbit -b -q 2 --out_json",
		"D=30s dev=mlx5_3 duplex=true gbits=true out-json=true qps=2 server=clx-host-108 size=65536 tcp-port=10000"},
	{perftest.WriteBW, "-D 5", "D=5s"},
	{perftest.WriteBW, "-D5 -f1", "D=5s margin=1s"},
	{perftest.WriteBW, "-D 4 -f 0", "D=4s margin=-1ns"},
	{perftest.WriteBW, "--duration=10 --margin=2 10.0.0.2", "D=10s margin=2s server=10.0.0.2"},
	{perftest.WriteBW, "--run_infinitely -D 2 -d rxe0 10.0.0.2", "D=2s dev=rxe0 infinite=true server=10.0.0.2"},
	{perftest.WriteBW, "--run_inf", "infinite=true"},
	{perftest.WriteBW, "-aF --report_gbits -d rxe0", "all=true dev=rxe0 gbits=true"},
	{perftest.ReadBW, "--report_gbit -s 4K -d rxe0 10.0.0.2", "dev=rxe0 gbits=true server=10.0.0.2 size=4096"},
	{perftest.SendBW, "--report_gbits -a -D 2", "D=2s all=true gbits=true"},
	{perftest.WriteBW, "--perform_warm_up -N", "no-peak=true warm-up=true"},
	{perftest.WriteLat, "-H -U -C", "cycles=true hist=true unsorted=true"},
	{perftest.WriteLat, "-I 64 -s 32", "inline=64 size=32"},
	{perftest.WriteBW, "-l 8 -Q 8", "cqmod=8 post-list=8"},
	{perftest.WriteBW, "--tclass=106", "tclass=106"},
	{perftest.WriteBW, "--flow_label 0x12345 -q 2", "flow-label=[74565] qps=2"},
	{perftest.ReadLat, "--wait_destroy=3", "wait-destroy=3"},
	{perftest.SendBW, "--flow_label=1,010,0x7 -c UD", "connection=UD flow-label=[1 8 7]"},
	{perftest.WriteBW, "-R -d rxe0", "comm-rdma-cm=true dev=rxe0 rdma-cm=true"},
	{perftest.WriteBW, "-d rxe0 -zR", "comm-rdma-cm=true dev=rxe0 rdma-cm=true"},
	{perftest.WriteBW, "--rdma_cm -T 32 10.0.0.2", "comm-rdma-cm=true rdma-cm=true server=10.0.0.2 tclass=32"},
	{perftest.ReadLat, "--comm_rdma_cm", "comm-rdma-cm=true"},
	{perftest.SendBW, "-z -q 2", "comm-rdma-cm=true qps=2"},
	{perftest.SendBW, "-R -c UD -q 2", "comm-rdma-cm=true connection=UD qps=2 rdma-cm=true"},
	{perftest.SendLat, "-c UD -R --tos 32 10.0.0.2", "comm-rdma-cm=true connection=UD rdma-cm=true server=10.0.0.2 tclass=32"},
	{perftest.SendBW, "-z -c UD -b", "comm-rdma-cm=true connection=UD duplex=true"},
	{perftest.WriteBW, "--tclass 0x68 --out_json_file=/tmp/r.json --out_json", "out-json-file=/tmp/r.json out-json=true tclass=104"},
	{perftest.WriteBW, "--output=bandwidth", "output=bandwidth"},
	{perftest.SendBW, "--output message_rate -D 3", "D=3s output=message_rate"},
	{perftest.ReadLat, "--output=latency -n 1000", "iters=1000 output=latency"},
	// gorxe's own options mix with perftest's.
	{perftest.WriteBW, "--link udp --ip 10.0.0.1 -d rxe0", "dev=rxe0 ip=10.0.0.1"},
	{perftest.WriteBW, "--ip 10.0.0.1", "ip=10.0.0.1"},
	{perftest.WriteBW, "--link tap --ip 10.0.0.5/24 --roce-port 4792 10.0.0.1", "ip=10.0.0.5/24 link=tap roce-port=4792 server=10.0.0.1"},
	{perftest.WriteBW, "--link mem --check --json -n 10", "check=true iters=10 json=true link=mem"},
	{perftest.WriteBW, "--give-up 30s --window 64", "give-up=30s window=64"},
	{perftest.WriteBW, "--check --json", "check=true json=true"},
	{perftest.WriteBW, "--cc none --link mem", "cc=none link=mem"},
	{perftest.WriteBW, "--cc dcqcn --cc-profile paper", "cc-profile=paper"},
	{perftest.ReadBW, "--cc-profile=connectx -s 4K", "cc-profile=connectx size=4096"},
	{perftest.WriteBW, "--line-rate 100M", "line-rate=100Mb/s"},
	{perftest.WriteBW, "--line-rate=25G --pacing-burst 4K 10.0.0.1", "line-rate=25Gb/s pacing-burst=4096 server=10.0.0.1"},
	{perftest.WriteBW, "--line-rate 40Gb/s --pacing-burst=1500", "line-rate=40Gb/s pacing-burst=1500"},
	{perftest.WriteBW, "--line-rate 2000k", "line-rate=2Mb/s"},
}

func TestPerfCommandLines(t *testing.T) {
	n := 0
	for _, tc := range perfCommandLines {
		n++
		r, err := parsePerf(tc.test, strings.Fields(tc.args))
		if err != nil {
			t.Errorf("%s %s: %v", tc.test, tc.args, err)
			continue
		}
		if got := perfSummary(r); got != tc.want {
			t.Errorf("%s %s:\n got  %s\n want %s", tc.test, tc.args, got, tc.want)
		}
	}
	if n < 60 {
		t.Errorf("%d command lines; the table should keep at least 60", n)
	}
}

// Lines perftest itself refuses, or that gorxe cannot honour: each is an
// error, never a silent fallback.
func TestPerfCommandLineErrors(t *testing.T) {
	for _, tc := range []struct {
		test    perftest.Test
		args    string
		want    string
		refused bool // an option gorxe refuses, rather than a bad line
	}{
		{perftest.WriteBW, "-c UD", "UD connection only possible in SEND verb", false},
		{perftest.ReadLat, "-c UD", "UD connection only possible in SEND verb", false},
		{perftest.WriteBW, "--tos 32 -d rxe0", "TOS only valid for rdma_cm", true},
		{perftest.WriteBW, "-z --tos 32", "TOS only valid for rdma_cm", true},
		{perftest.WriteBW, "-R --tos 257", "between 0 and 256", false},
		{perftest.WriteBW, "-R --hop_limit 3", "hop limit 64", true},
		{perftest.WriteBW, "-R -c UD", "UD connection only possible in SEND verb", false},
		{perftest.ReadBW, "-c UD -R", "UD connection only possible in SEND verb", false},
		{perftest.ReadBW, "-c UC", "UC connection not possible in READ/ATOMIC verbs", false},
		{perftest.ReadLat, "-c UC", "UC connection not possible in READ/ATOMIC verbs", false},
		{perftest.AtomicBW, "-c UC", "UC connection not possible in READ/ATOMIC verbs", false},
		{perftest.AtomicLat, "-c UC", "UC connection not possible in READ/ATOMIC verbs", false},
		{perftest.WriteBW, "-c XRC", "XRC", true},
		{perftest.WriteBW, "-c DC", "DC", true},
		{perftest.WriteBW, "-c FOO", "unknown connection type", false},
		{perftest.WriteBW, "--data_validation", "--check", true},
		{perftest.WriteBW, "--use_cuda=0", "GPU", true},
		{perftest.WriteBW, "-O", "one port", true},
		{perftest.WriteBW, "-i 2", "one port", false},
		{perftest.WriteBW, "--pkey_index 1", "one entry", false},
		{perftest.WriteBW, "-s 0", "message size", false},
		{perftest.WriteBW, "-s 4X", "not a number", false},
		{perftest.WriteBW, "-n 4", "5..", false},
		{perftest.WriteBW, "-t 0", "Tx depth should be between 1 and 15000", false}, // not the default depth
		{perftest.WriteBW, "-t 15001", "Tx depth should be between 1 and 15000", false},
		{perftest.SendBW, "-r 0", "Rx depth should be between 1 and 16384", false},
		{perftest.WriteBW, "-Q 0", "CQ moderation should be between 1 and 1024", false},
		{perftest.WriteBW, "-Q 1025", "CQ moderation should be between 1 and 1024", false},
		{perftest.WriteBW, "-q 0", "num of Qps should be between 1 and 16384", false},
		{perftest.WriteBW, "-l 0", "Post List size must be positive", false},
		{perftest.WriteBW, "-p 70000", "Port should be between 0 and 65535", false},
		{perftest.WriteBW, "-s 8 -s 16", "duplicated", false},
		{perftest.WriteBW, "-A CMP_AND_SWAP", "atomic", false},
		{perftest.WriteBW, "-x 300", "0..255", false},
		{perftest.WriteBW, "a b", "one server name", false},
		{perftest.WriteBW, "--report", "ambiguous", false},
		{perftest.WriteBW, "--nosuch", "unrecognized option", false},
		{perftest.WriteBW, "-s", "requires an argument", false},
		{perftest.WriteBW, "--give-up 0s", "positive duration", false},
		{perftest.WriteBW, "--roce-port 70000", "not a UDP port", false},
		{perftest.WriteBW, "--che", "unrecognized option", false}, // gorxe's own are typed in full
		{perftest.WriteBW, "-D 0", "positive", false},
		{perftest.WriteBW, "-f -1", "negative", false},
		{perftest.WriteBW, "--output=latency", "BW can be", false},
		{perftest.WriteLat, "--output=bandwidth", "LAT can be", false},
		{perftest.WriteBW, "--output=loud", "invalid verbosity", false},
		{perftest.WriteBW, "--tclass 256", "0..255", false},
		{perftest.WriteBW, "--flow_label 0x100000", "20 bits", false},
		{perftest.WriteBW, "--flow_label 1,-2", "20 bits", false},
		{perftest.WriteBW, "--flow_label 1,,2", "not a number", false},
		{perftest.WriteBW, "--wait_destroy -1", "wait_destroy should be between 0 and", false},
		{perftest.WriteBW, "--source_mac 00:11:22:33:44:55", "raw Ethernet", true},
		{perftest.WriteBW, "--cc reno", "want dcqcn", false},
		{perftest.WriteBW, "--cc-profile fast", "want connectx", false},
		{perftest.WriteBW, "--cc none --cc-profile paper", "congestion control is off", false},
		{perftest.WriteBW, "--cc-prof paper", "unrecognized option", false}, // typed in full
		{perftest.WriteBW, "--line-rate 100", "with its unit", false},
		{perftest.WriteBW, "--line-rate fast", "with its unit", false},
		{perftest.WriteBW, "--line-rate 0G", "with its unit", false},
		{perftest.WriteBW, "--line-rate 1.5M", "whole Mb/s", false}, // the connectx profile's unit
		{perftest.WriteBW, "--line-rate 200000G", "at most", false},
		{perftest.WriteBW, "--line-rate 100M --cc-param rpg_min_rate=200", "rpg_min_rate 200Mb/s above the line rate", false},
		{perftest.WriteBW, "--cc none --line-rate 1G", "congestion control is off", false},
		{perftest.WriteBW, "--pacing-burst 0", "size in bytes", false},
		{perftest.WriteBW, "--pacing-burst 65M", "size in bytes", false},
		{perftest.WriteBW, "--cc none --pacing-burst 4K", "congestion control is off", false},
		{perftest.WriteBW, "--cc-param rpg_ai_rate", "NAME=VALUE", false},
		{perftest.WriteBW, "--cc-param nosuch=1", `no parameter "nosuch"`, false},
		{perftest.WriteBW, "--cc-param rpg_time_reset=soon", "rpg_time_reset", false},
		{perftest.WriteBW, "--cc-param rpg_ai_rate=0.5", "whole Mb/s", false},
		{perftest.WriteBW, "--cc-param rpg_min_rate=0", "rpg_min_rate", false},
		{perftest.WriteBW, "--cc none --cc-param rpg_ai_rate=1", "congestion control is off", false},
		{perftest.WriteBW, "--cc-par rpg_ai_rate=1", "unrecognized option", false}, // typed in full
	} {
		_, err := parsePerf(tc.test, strings.Fields(tc.args))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: error %v, want one saying %q", tc.test, tc.args, err, tc.want)
			continue
		}
		if refusal(err) != tc.refused {
			t.Errorf("%s %s: refusal %v, want %v (%v)", tc.test, tc.args, refusal(err), tc.refused, err)
		}
	}
}

// perftest's long options (HEAD's table, perftest_parameters.c), for the
// prefix test.
var perftestLongNames = strings.Fields(`port ib-dev ib-port mtu size iters tx-depth qp-timeout sl gid-index
all CPU-freq connection qp events vector inline_size outs mcg comm_rdma_cm rdma_cm tos hop_limit help
MGID rx-depth bidirectional cq-mod noPeak version report-cycles report-histogrm report-unsorted
atomic_type dualport post_list duration margin source_mac dest_mac dest_ip source_ip dest_port
source_port ethertype limit_bw limit_msgrate server client mac_fwd use_rss report-counters force-link
remote_mac local_mac remote_ip local_ip remote_port local_port run_infinitely report_gbits use-srq
no_lock use-null-mr report-both reversed pkey_index tcp burst_size typical_pkt_size rate_limit
rate_limit_type rate_units output cpu_util out_json out_json_file latency_gap flow_label retry_count
dont_xchg_versions payload_file_path use_cuda use_cuda_bus_id use_cuda_dmabuf use_cuda_pcie_mapping
use_data_direct cuda_mem_type use_musa use_musa_bus_id use_musa_dmabuf use_musa_pcie_mapping use_rocm
use_rocm_dmabuf use_neuron use_neuron_dmabuf use_hl use_mlu use_mlu_dmabuf use_opencl
opencl_platform_id use_ib_dm_dmabuf gpu_touch mmap mmap-offset ipv6 ipv6-addr raw_ipv6
report-per-port odp use_hugepages use_old_post_send promiscuous sniffer raw_mcast mr_per_qp dlid
tclass wait_destroy flows flows_burst reply_every perform_warm_up vlan_en vlan_pcp recv_post_list
aes_xts encrypt_on_tx sig_before aes_block_size kek_path credentials_path data_enc_keys_number
data_enc_key_app_path log_dci_streams log_active_dci_streams disable_pcie_relaxed use_ooo
congest_type bind_source_ip write_with_imm send_with_imm no_enhanced_reorder unsolicited_write
connectionless cqe_poll tph_mem cpu_id ph disable_dynamic_polling sig_offload data_validation
data_validation_debug pin_cores numa_node disable_numa`)

// Every perftest long option is in gorxe's table, and every prefix of one
// resolves in gorxe as getopt_long resolves it in perftest: gorxe's own
// long options take no prefix away from perftest's.
func TestPerftestPrefixes(t *testing.T) {
	var ours, gorxes []string
	for _, o := range perfOptions() {
		if o.gorxe {
			gorxes = append(gorxes, o.long)
			continue
		}
		ours = append(ours, o.long)
	}
	for _, g := range otherPerftestOptions {
		ours = append(ours, strings.Fields(g.names)...)
	}
	resolve := func(names []string, typed string) string {
		opts := make([]getopt.Option, len(names))
		for i, n := range names {
			opts[i] = getopt.Option{Long: n}
		}
		var got string
		for i := range opts {
			n := names[i]
			opts[i].Set = func(string) error { got = n; return nil }
			opts[i].Arg = getopt.OptionalArg
		}
		if _, err := getopt.Parse(opts, []string{"--" + typed}); err != nil {
			return "error"
		}
		return got
	}
	for _, name := range perftestLongNames {
		if !slices.Contains(ours, name) {
			t.Errorf("--%s: perftest's option is not in gorxe's table", name)
			continue
		}
		for i := 1; i <= len(name); i++ {
			typed := name[:i]
			if slices.Contains(gorxes, typed) {
				continue // one of gorxe's own, typed in full
			}
			want := resolve(perftestLongNames, typed)
			if got := resolve(ours, typed); got != want {
				t.Errorf("--%s: perftest reads %s, gorxe %s", typed, want, got)
			}
		}
	}
}

func TestPerfHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"write_bw", "-h"}, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"perftest options gorxe honours:", "-s, --size VALUE", "refuses:", "--rdma_cm", "accepts", "gorxe's own options:", "--roce-port VALUE"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-h does not say %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run([]string{"ib_read_lat", "-V"}, &out, &errOut); code != exitOK || out.String() != "Version: "+perftest.Version+"\n" {
		t.Errorf("-V: exit %d, %q", code, out.String())
	}
}

// perftest's tool names run gorxe's tests, as "gorxe NAME" and as the
// binary's own name.
func TestToolNames(t *testing.T) {
	for _, tc := range []struct{ argv0, want string }{
		{"/usr/local/bin/ib_write_bw", "ib_write_bw"},
		{"ib_send_lat", "ib_send_lat"},
		{"ibv_rc_pingpong", "ibv_rc_pingpong"},
		{"show_gids", "show_gids"},
		{"raw_ethernet_bw", "raw_ethernet_bw"},
		{"gorxe", ""},
		{"/tmp/go-build/exe/gorxe.test", ""},
	} {
		if got := toolName(tc.argv0); got != tc.want {
			t.Errorf("toolName(%q) = %q, want %q", tc.argv0, got, tc.want)
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"ib_write_bw", "--link", "mem", "-n", "5", "-s", "1K", "--check", "-d", "mlx5_0"}, &out, &errOut); code != exitOK {
		t.Fatalf("gorxe ib_write_bw: exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "Device         : mlx5_0") || !strings.Contains(out.String(), "data check: ok") {
		t.Errorf("gorxe ib_write_bw -d mlx5_0:\n%s", out.String())
	}
	errOut.Reset()
	if code := run([]string{"raw_ethernet_bw"}, &out, &errOut); code != exitError || !strings.Contains(errOut.String(), "RoCE") {
		t.Errorf("raw_ethernet_bw: exit %d, %q", code, errOut.String())
	}
}

// --cc-param sets DCQCN's parameters by NVIDIA's names over the profile,
// whichever comes first on the command line, repeated or with commas; the
// fields it names change and no other.
func TestCCParam(t *testing.T) {
	for _, tc := range []struct {
		args string
		want func() congestion.Params
	}{
		{"--cc-param rpg_time_reset=20000,rpg_ai_rate=1 --cc-param dce_tcp_rtt=1000", func() congestion.Params {
			p := congestion.ConnectX()
			p.RPGTimeReset, p.RPGAIRate, p.DCETCPRTT = 20*time.Millisecond, congestion.MbitPerSecond, time.Millisecond
			return p
		}},
		{"--cc-param rpg_ai_rate=0.5 --cc-profile paper", func() congestion.Params {
			p := congestion.Paper()
			p.RPGAIRate = 500 * congestion.KbitPerSecond
			return p
		}},
		{"--cc-profile paper --cc-param RP_MAX_RATE=500Mb/s,min_time_between_cnps=1.5us", func() congestion.Params {
			p := congestion.Paper()
			p.RPGMaxRate, p.MinTimeBetweenCNPs = 500*congestion.MbitPerSecond, 1500*time.Nanosecond
			return p
		}},
		{"--cc-param rpg_ai_rate=1 --cc-param rpg_ai_rate=2", func() congestion.Params {
			p := congestion.ConnectX()
			p.RPGAIRate = 2 * congestion.MbitPerSecond // the last one given
			return p
		}},
	} {
		r, err := parsePerf(perftest.WriteBW, strings.Fields(tc.args))
		if err != nil {
			t.Errorf("%s: %v", tc.args, err)
			continue
		}
		if want := tc.want(); r.p.CCParams != want || r.link.ccParams != want {
			t.Errorf("%s:\n got  %v\n want %v", tc.args, r.p.CCParams, want)
		}
	}
}
