// The ladder diagram of a gorxe explain report.
//
// The report (explain.Report as JSON) is in the element #report. The page
// draws one vertical lane per endpoint and, going down, one arrow per
// packet from its sender's lane to its receiver's, with the transport
// events as notes beside the lanes. Clicking a packet shows, in #details,
// decode's fields, the plain-sentence explanation and both ends' state
// after it.
//
// A capture can hold tens of thousands of packets, so the diagram is a
// list of rows (a packet, a note or a gap in time) of known heights, and
// only the rows in view are drawn: the scrolling element holds a spacer
// as tall as all of them and one svg, moved to where the visible rows are
// and redrawn on every scroll.
'use strict';

(function () {

	// ---- The report --------------------------------------------------

	const source = document.getElementById('report').textContent;
	const report = JSON.parse(source, source.includes('"wr_id"') ? exactWRID : undefined);
	// Go encodes an empty slice or map as null.
	const lanes = report.lanes || [];
	const packets = report.packets || [];
	const conns = report.connections || [];
	const devices = report.devices || {};
	const deviceEvents = (report.device_events || []).slice().sort((a, b) => a.time - b.time);
	const laneIndex = new Map(lanes.map((addr, i) => [addr, i]));

	// A work request ID is any 64-bit number (often a pointer), more than
	// a JavaScript number holds exactly: exactWRID, a JSON.parse reviver,
	// reads it from its digits as a BigInt where the browser gives them.
	function exactWRID(key, value, context) {
		return key === 'wr_id' && context && context.source ? BigInt(context.source) : value;
	}

	// ---- Formatting ----------------------------------------------------

	const hex = n => '0x' + n.toString(16);

	// seconds formats nanoseconds as decode prints times: "1.181646".
	function seconds(ns) {
		const sign = ns < 0 ? '-' : '';
		ns = Math.abs(ns);
		const us = Math.floor((ns % 1e9) / 1e3);
		return sign + Math.floor(ns / 1e9) + '.' + String(us).padStart(6, '0');
	}

	// shortDuration formats nanoseconds to three digits: "67.1 ms".
	function shortDuration(ns) {
		const units = [[1e9, 's'], [1e6, 'ms'], [1e3, 'µs']];
		for (const [size, name] of units) {
			if (ns >= size) {
				return Number((ns / size).toPrecision(3)) + ' ' + name;
			}
		}
		return Math.round(ns) + ' ns';
	}

	// goDuration formats nanoseconds as Go's time.Duration.String does,
	// so that an event reads here as gorxe's --trace prints it.
	function goDuration(ns) {
		if (ns === 0) {
			return '0s';
		}
		const sign = ns < 0 ? '-' : '';
		ns = Math.abs(ns);
		if (ns < 1e3) {
			return sign + ns + 'ns';
		}
		if (ns < 1e6) {
			return sign + decimal(ns, 1e3) + 'µs';
		}
		if (ns < 1e9) {
			return sign + decimal(ns, 1e6) + 'ms';
		}
		const h = Math.floor(ns / 3600e9);
		const m = Math.floor((ns % 3600e9) / 60e9);
		const s = decimal(ns % 60e9, 1e9) + 's';
		if (h > 0) {
			return sign + h + 'h' + m + 'm' + s;
		}
		return sign + (m > 0 ? m + 'm' : '') + s;
	}

	// decimal writes n / unit with every digit of the remainder but the
	// trailing zeros, as Go does: decimal(1500, 1000) is "1.5".
	function decimal(n, unit) {
		const whole = Math.floor(n / unit);
		const rest = n % unit;
		if (rest === 0) {
			return String(whole);
		}
		const digits = String(unit).length - 1;
		return whole + '.' + String(rest).padStart(digits, '0').replace(/0+$/, '');
	}

	// rate formats bits per second as the trace does: "7.50 Gb/s".
	function rate(bps) {
		return bps >= 1e9 ? fixed(bps / 1e9, 2) + ' Gb/s' : fixed(bps / 1e6, 2) + ' Mb/s';
	}

	// fixed writes x with d decimals as Go's strconv.FormatFloat(x, 'f',
	// d, 64) does, so that an event reads as the trace prints it. Both
	// round the number's exact value, but a tie goes to the even digit in
	// Go and up in toFixed: DCQCN's alpha 0.0625 is 0.062 in Go, 0.063
	// with toFixed(3). toFixed(100) is exact for every |x| over 2^-48.
	function fixed(x, d) {
		if (!Number.isFinite(x)) {
			return Number.isNaN(x) ? 'NaN' : x > 0 ? '+Inf' : '-Inf';
		}
		const [whole, frac] = Math.abs(x).toFixed(100).split('.');
		const kept = BigInt(whole + frac.slice(0, d));
		const rest = frac.slice(d);
		const half = '5' + '0'.repeat(rest.length - 1);
		const up = rest > half || (rest === half && kept % 2n === 1n);
		const digits = (kept + (up ? 1n : 0n)).toString().padStart(d + 1, '0');
		const sign = x < 0 ? '-' : '';
		return d === 0 ? sign + digits : sign + digits.slice(0, -d) + '.' + digits.slice(-d);
	}

	function bytes(n) {
		const units = [[1 << 30, 'GiB'], [1 << 20, 'MiB'], [1 << 10, 'KiB']];
		for (const [size, name] of units) {
			if (n >= size) {
				return Number((n / size).toPrecision(3)) + ' ' + name;
			}
		}
		return n + ' bytes';
	}

	function plural(n, one, many) {
		return n + ' ' + (n === 1 ? one : many || one + 's');
	}

	// The short names of the NAK codes decode spells out in a packet's
	// aeth(...): "aeth(NAK PSN_SEQ_ERROR msn=0)".
	const nakNames = {
		PSN_SEQ_ERROR: 'seq',
		INVALID_REQUEST: 'inv req',
		REMOTE_ACCESS_ERROR: 'access',
		REMOTE_OPERATIONAL_ERROR: 'op err',
		INVALID_RD_REQUEST: 'inv rd',
	};

	// shortOpcode names a packet for its arrow: the opcode without its
	// service ("RC_") and with the long words cut, "WRITE_FIRST",
	// "READ_RESP_LAST"; an ACKNOWLEDGE is named by its AETH, which says
	// whether it is an ACK, a NAK or an RNR NAK.
	function shortOpcode(p) {
		const op = p.opcode.replace(/^(RC|UC|RD|UD|XRC)_/, '');
		if (op === 'ACKNOWLEDGE') {
			return ackName(p.fields);
		}
		return op.replace(/^RDMA_/, '')
			.replace('READ_RESPONSE', 'READ_RESP')
			.replace('READ_REQUEST', 'READ_REQ')
			.replace('ATOMIC_ACKNOWLEDGE', 'ATOMIC_ACK')
			.replace('_WITH_IMMEDIATE', '_IMM')
			.replace('_WITH_INVALIDATE', '_INV');
	}

	function ackName(fields) {
		const m = /aeth\((\S+)(?: (\w+))?/.exec(fields || '');
		if (!m) {
			return 'ACK';
		}
		if (m[1] === 'NAK') {
			return 'NAK(' + (nakNames[m[2]] || String(m[2]).toLowerCase()) + ')';
		}
		return m[1] === 'RNR_NAK' ? 'RNR_NAK' : 'ACK';
	}

	// eventText renders a transport event as trace.Event.String does in
	// Go (trace/trace.go): "go back to PSN 12: NAK".
	function eventText(e) {
		const op = e.opcode ? e.opcode + ' ' : '';
		let s;
		switch (e.kind) {
		case 'state': s = 'state ' + e.from + ' -> ' + e.to; break;
		case 'nak_sent':
			s = 'NAK ' + (e.syndrome || '') + ' for ' + op + 'PSN ' + e.psn;
			if (e.expected !== e.psn) {
				s += ', expected ' + e.expected;
			}
			break;
		case 'rnr_nak_sent': s = 'RNR NAK for ' + op + 'PSN ' + e.psn + ': no receive posted, timer ' + goDuration(e.wait); break;
		case 'duplicate': s = 'duplicate ' + op + 'PSN ' + e.psn + ', expected ' + e.expected; break;
		case 'dropped': s = 'dropped ' + op + 'PSN ' + e.psn; break;
		case 'cnp_sent': s = 'ECN CE at PSN ' + e.psn + ': CNP to QP ' + hex(e.dest_qp); break;
		case 'nak_received': s = 'NAK ' + (e.syndrome || '') + ' received at PSN ' + e.psn; break;
		case 'rnr_nak_received': s = 'RNR NAK at PSN ' + e.psn + ': peer has no receive posted, wait ' + goDuration(e.wait); break;
		case 'implied_nak': s = 'implied NAK: answers to work request ' + e.wr_id + ' lost from PSN ' + e.psn; break;
		case 'go_back': s = 'go back to PSN ' + e.psn; break;
		case 'timeout': s = 'local ACK timeout at PSN ' + e.psn; break;
		case 'probe': s = 'no ACK for ' + goDuration(e.wait) + ': probing with PSN ' + e.psn; break;
		case 'rnr_wait_over': s = 'RNR wait over, resending from PSN ' + e.psn; break;
		case 'wr_failed': s = 'work request ' + e.wr_id + ' (' + (e.opcode || '') + ') failed: ' + e.status; break;
		case 'cnp_received': s = 'CNP received: ' + rateTriple(e); break;
		case 'rate_change': s = 'DCQCN rate ' + rateTriple(e).replace(/^rate /, ''); break;
		case 'error': s = 'error'; break;
		default: s = e.kind;
		}
		return e.reason ? s + ': ' + e.reason : s;
	}

	function rateTriple(e) {
		return 'rate ' + rate(e.rate) + ', target ' + rate(e.target_rate) + ', alpha ' + fixed(e.alpha, 3);
	}

	function endName(end) {
		return end.qpn ? end.addr + ' QP ' + hex(end.qpn) : end.addr;
	}

	function connName(c) {
		return c.service + ' ' + endName(c.ends[0]) + ' ⇄ ' + endName(c.ends[1]);
	}

	// summaryText is a connection in a sentence: what each end sent.
	function summaryText(c) {
		const s = c.summary;
		const sides = [0, 1].map(k => endName(c.ends[k]) + ' sent ' + sideFacts(s, k).join(', '));
		return connName(c) + ', ' + shortDuration(s.duration) + ': ' + sides.join('; ') + '.';
	}

	function sideFacts(s, k) {
		const facts = [plural(s.packets[k], 'packet')];
		if (s.messages[k]) {
			facts.push(plural(s.messages[k], 'message'));
		}
		if (s.bytes[k]) {
			facts.push(bytes(s.bytes[k]) + ' (' + rate(s.goodput[k]) + ' goodput)');
		}
		const naks = Object.entries((s.naks && s.naks[k]) || {});
		const nakCount = naks.reduce((sum, [, n]) => sum + n, 0);
		if (nakCount) {
			facts.push(plural(nakCount, 'NAK') + ' (' + naks.map(([why, n]) => why + ' ×' + n).join(', ') + ')');
		}
		const counted = [[s.retransmissions, 'retransmission'], [s.rnr_naks, 'RNR NAK'], [s.timeouts, 'timeout'], [s.cnps, 'CNP']];
		for (const [counts, name] of counted) {
			if (counts[k]) {
				facts.push(plural(counts[k], name));
			}
		}
		return facts;
	}

	// ---- Which lane an event belongs on -----------------------------

	// Events a responder reports, at the end that receives the requests;
	// the other kinds are the requester's.
	const responderKinds = new Set(['nak_sent', 'rnr_nak_sent', 'duplicate', 'dropped', 'cnp_sent']);

	// isResponse says whether a packet goes from responder to requester.
	// A CNP goes from where the congestion was seen to the sender that
	// caused it, so it counts as one.
	function isResponse(p) {
		return /ACKNOWLEDGE|READ_RESPONSE|^CNP$/.test(p.opcode);
	}

	// laneOfDevice is the lane of a device named in an event: the report
	// maps device names to addresses; a device may also be named by its
	// address. -1 if neither.
	function laneOfDevice(name) {
		if (!name) {
			return -1;
		}
		const lane = laneIndex.get(devices[name] || name);
		return lane === undefined ? -1 : lane;
	}

	// laneOfQP is the lane of the one end with QP number qp among the
	// ends of connection c (of every connection when c is -1), or -1 when
	// none or several have it: both ends of a connection often have the
	// same QP number.
	function laneOfQP(qp, c) {
		const ends = (c >= 0 ? [conns[c]] : conns).flatMap(conn => conn.ends);
		const addrs = new Set(ends.filter(e => e.qpn === qp).map(e => e.addr));
		if (addrs.size !== 1) {
			return -1;
		}
		const lane = laneIndex.get([...addrs][0]);
		return lane === undefined ? -1 : lane;
	}

	// laneOfPacketEvent places an event explain inferred from packet p:
	// by its device, by its QP, or else by what kind of event it is.
	function laneOfPacketEvent(p, e) {
		for (const lane of [laneOfDevice(e.device), laneOfQP(e.qp, p.conn)]) {
			if (lane >= 0) {
				return lane;
			}
		}
		const responder = isResponse(p) ? p.src : p.dst;
		const requester = isResponse(p) ? p.dst : p.src;
		const lane = laneIndex.get(responderKinds.has(e.kind) ? responder : requester);
		return lane === undefined ? 0 : lane;
	}

	// laneOfDeviceEvent places an event of a device's trace by the
	// device or else by its QP; -1 if neither tells.
	function laneOfDeviceEvent(e) {
		const lane = laneOfDevice(e.device);
		return lane >= 0 ? lane : laneOfQP(e.qp, -1);
	}

	// ---- The view: what is shown, how big -----------------------------

	const view = {
		zoom: 1,
		filter: { kind: 'all' }, // or { kind: 'conn', conn: 2 } or { kind: 'qp', qp: 0x11 }
		selected: -1,            // index in packets, or -1
		rows: [],                // see buildRows
		tops: new Float64Array(1), // tops[k] is where row k starts; tops[rows.length] the end
		packetRow: new Map(),    // index in packets -> its row, for the packets shown
	};

	// The diagram's geometry, in pixels.
	const MARGIN = 130;     // the left column: each packet's number and time
	const LANE_GAP = 480;   // between lanes: room for the labels and notes
	const FIRST_LANE = MARGIN + 110;
	const laneX = i => FIRST_LANE + i * LANE_GAP;
	const WIDTH = laneX(Math.max(lanes.length, 1) - 1) + 130;
	const NOTE_CHAR = 6.7;  // the width of a character of a note (monospace 11px)
	const OVERSCAN = 600;   // drawn beyond the visible part, so scrolling shows no blank

	// Row heights at zoom 1, and the least they shrink to.
	const HEIGHT = { pkt: 38, note: 22, gap: 30 };
	const MIN_HEIGHT = { pkt: 6, note: 4, gap: 14 };

	function rowHeight(kind) {
		return Math.max(MIN_HEIGHT[kind], Math.round(HEIGHT[kind] * view.zoom));
	}

	function shows(p) {
		const f = view.filter;
		return f.kind === 'all' || (f.kind === 'conn' ? p.conn === f.conn : p.dest_qp === f.qp);
	}

	function showsDeviceEvent(e) {
		const f = view.filter;
		if (f.kind === 'all') {
			return true;
		}
		if (f.kind === 'qp') {
			return e.qp === f.qp;
		}
		const lane = laneOfDeviceEvent(e);
		return conns[f.conn].ends.some(end => end.qpn === e.qp && (lane < 0 || lanes[lane] === end.addr));
	}

	// A pause between packets is drawn as a gap when it is ten times the
	// typical (median) spacing of the capture's packets and at least
	// 100 µs: a retransmission timeout stands out, the ordinary jitter of
	// a transfer does not.
	const gapThreshold = (function () {
		const steps = [];
		for (let i = 1; i < packets.length; i++) {
			const dt = packets[i].time - packets[i - 1].time;
			if (dt > 0) {
				steps.push(dt);
			}
		}
		steps.sort((a, b) => a - b);
		const median = steps.length ? steps[steps.length >> 1] : 0;
		return Math.max(10 * median, 100e3);
	})();

	// buildRows lays out, top to bottom, the packets the filter shows in
	// capture order, each followed by the events explain inferred from
	// it, with the devices' events placed by time among them and a gap
	// row wherever time jumps.
	function buildRows() {
		const rows = [];
		let last = null; // the time of the previous row with a time
		const at = time => {
			if (last !== null && time - last >= gapThreshold) {
				rows.push({ kind: 'gap', dt: time - last });
			}
			last = last === null ? time : Math.max(last, time);
		};
		const addDeviceEvent = e => {
			if (showsDeviceEvent(e)) {
				at(e.time);
				// An event no lane claims goes on the first; its note names
				// the device and the QP.
				rows.push({ kind: 'note', ev: e, lane: Math.max(0, laneOfDeviceEvent(e)), device: true });
			}
		};
		let d = 0;
		packets.forEach((p, i) => {
			if (!shows(p)) {
				return;
			}
			while (d < deviceEvents.length && deviceEvents[d].time < p.time) {
				addDeviceEvent(deviceEvents[d++]);
			}
			at(p.time);
			rows.push({ kind: 'pkt', i });
			for (const e of p.events || []) {
				rows.push({ kind: 'note', ev: e, lane: laneOfPacketEvent(p, e), device: false });
			}
		});
		deviceEvents.slice(d).forEach(addDeviceEvent);
		view.rows = rows;
		view.packetRow = new Map();
		rows.forEach((r, k) => {
			if (r.kind === 'pkt') {
				view.packetRow.set(r.i, k);
			}
		});
		layOut();
	}

	// layOut computes where each row starts, for the zoom.
	function layOut() {
		const rows = view.rows;
		const tops = new Float64Array(rows.length + 1);
		for (let k = 0; k < rows.length; k++) {
			tops[k + 1] = tops[k] + rowHeight(rows[k].kind);
		}
		view.tops = tops;
		canvas.style.height = (tops[rows.length] + 40) + 'px';
	}

	// rowAt is the row at height y of the diagram (binary search).
	function rowAt(y) {
		const tops = view.tops;
		let lo = 0;
		let hi = view.rows.length - 1;
		while (lo < hi) {
			const mid = (lo + hi + 1) >> 1;
			if (tops[mid] <= y) {
				lo = mid;
			} else {
				hi = mid - 1;
			}
		}
		return lo;
	}

	// ---- Drawing -------------------------------------------------------

	const diagram = document.getElementById('diagram');
	const canvas = document.getElementById('canvas');
	const svg = document.getElementById('ladder');
	// The svg namespace is taken from the page's own svg element so that
	// the page holds no URL at all.
	const SVG_NS = svg.namespaceURI;

	function el(name, attrs, parent) {
		const e = document.createElementNS(SVG_NS, name);
		for (const [k, v] of Object.entries(attrs || {})) {
			e.setAttribute(k, v);
		}
		if (parent) {
			parent.appendChild(e);
		}
		return e;
	}

	function text(content, attrs, parent) {
		const t = el('text', attrs, parent);
		t.textContent = content;
		return t;
	}

	const laneHead = document.getElementById('lane-head');

	// visibleRange is the part of the diagram in view, in the canvas's
	// coordinates: from below the sticky lane heads, which cover the top
	// of the scrolling element, to its bottom.
	function visibleRange() {
		const origin = diagram.scrollTop - canvas.offsetTop;
		return [origin + laneHead.offsetHeight, origin + diagram.clientHeight];
	}

	// scrollToY scrolls the diagram so that y of the canvas is a fraction
	// of the way down the part in view.
	function scrollToY(y, fraction) {
		const head = laneHead.offsetHeight;
		diagram.scrollTop = canvas.offsetTop - head + y - (diagram.clientHeight - head) * fraction;
	}

	// A scroll redraws at the next frame, once however many scroll events
	// came; what the reader does (select, filter, zoom) redraws at once.
	let renderPending = false;

	function scheduleRender() {
		if (!renderPending) {
			renderPending = true;
			requestAnimationFrame(() => {
				renderPending = false;
				render();
			});
		}
	}

	// render draws the rows in view, and OVERSCAN pixels more each way,
	// into the svg, which it moves to their place.
	function render() {
		svg.replaceChildren();
		if (view.rows.length === 0) {
			svg.setAttribute('height', 0);
			return;
		}
		const [top, bottom] = visibleRange();
		const first = rowAt(top - OVERSCAN);
		const last = rowAt(bottom + OVERSCAN);
		const y0 = view.tops[first];
		const height = view.tops[last + 1] - y0;
		svg.style.top = y0 + 'px';
		svg.setAttribute('width', WIDTH);
		svg.setAttribute('height', height);
		drawLaneLines(height);
		for (let k = first; k <= last; k++) {
			drawRow(view.rows[k], view.tops[k] - y0, rowHeight(view.rows[k].kind));
		}
	}

	function drawLaneLines(height) {
		lanes.forEach((_, i) => {
			el('line', { class: 'lane-line', x1: laneX(i), y1: 0, x2: laneX(i), y2: height }, svg);
		});
	}

	function drawRow(row, y, h) {
		if (row.kind === 'pkt') {
			drawPacket(row.i, y, h);
		} else if (row.kind === 'note') {
			drawNote(row, y, h);
		} else {
			drawGap(row, y, h);
		}
	}

	// isLost says whether the packet never arrived. A packet resent and
	// lost again has the anomaly "retransmission" and Lost set.
	function isLost(p) {
		return p.lost || p.anomaly === 'lost';
	}

	// anomalyClass turns an anomaly tag into a class: "out of sequence"
	// is a-out-of-sequence.
	function anomalyClass(tag) {
		return 'a-' + tag.replace(/\s+/g, '-');
	}

	function packetClass(p, i) {
		const classes = ['pkt'];
		if (p.anomaly) {
			classes.push(anomalyClass(p.anomaly));
		}
		if (isLost(p)) {
			classes.push('lost'); // dashed, whatever its colour
		}
		if (p.opcode === 'CNP') {
			classes.push('op-cnp');
		}
		if (i === view.selected) {
			classes.push('selected');
		}
		return classes.join(' ');
	}

	// drawPacket draws packet i in the row at y, h high: a row-wide
	// rectangle to click on, its number and time in the margin, the arrow
	// and its label. Below 22 pixels a row has room for the arrow only.
	function drawPacket(i, y, h) {
		const p = packets[i];
		const g = el('g', { class: packetClass(p, i), 'data-index': p.index, 'data-i': i, 'data-conn': p.conn }, svg);
		el('rect', { class: 'hit', x: 0, y, width: WIDTH, height: h }, g);
		const from = laneIndex.get(p.src) ?? 0;
		const to = laneIndex.get(p.dst) ?? 0;
		const y1 = y + h * 0.5;
		const y2 = y + h * 0.85;
		drawArrow(g, laneX(from), y1, laneX(to), y2, isLost(p));
		if (h >= 22) {
			text('#' + p.index, { class: 'margin-text', x: 8, y: y1 + 4 }, g);
			text(seconds(p.time), { class: 'margin-text', x: 56, y: y1 + 4 }, g);
			drawLabel(g, p, (laneX(from) + laneX(to)) / 2 + (from === to ? 60 : 0), y1 - 5);
		}
	}

	// The QP goes on the labels only when there is more than one
	// connection to tell apart.
	const labelQP = conns.length > 1;

	function drawLabel(g, p, x, y) {
		// A CNP's BTH has no PSN that means anything.
		const name = p.opcode === 'CNP' ? 'CNP' : shortOpcode(p) + ' psn ' + p.psn;
		const label = text(name, { class: 'label', x, y, 'text-anchor': 'middle' }, g);
		if (labelQP) {
			const qp = el('tspan', { class: 'qp' }, label);
			qp.textContent = ' qp ' + hex(p.dest_qp);
		}
	}

	// drawArrow draws an arrow from (x1, y1) to (x2, y2) in g: a shaft and
	// a head, or, for a lost packet, a dashed shaft that stops short of
	// the receiving lane in a cross. An arrow from a lane to itself loops
	// out to the right.
	function drawArrow(g, x1, y1, x2, y2, lost) {
		if (x1 === x2) {
			const out = x1 + 40;
			el('polyline', { class: 'shaft', points: `${x1},${y1} ${out},${y1} ${out},${y2} ${x2 + 2},${y2}` }, g);
			drawHead(g, out, y2, x2, y2);
			return;
		}
		if (lost) {
			// End three quarters of the way, so the cross sits clearly
			// before the receiver's lane: the packet never got there.
			const xe = x1 + (x2 - x1) * 0.75;
			const ye = y1 + (y2 - y1) * 0.75;
			el('line', { class: 'shaft', x1, y1, x2: xe, y2: ye }, g);
			drawCross(g, xe, ye, 5);
			return;
		}
		el('line', { class: 'shaft', x1, y1, x2, y2 }, g);
		drawHead(g, x1, y1, x2, y2);
	}

	// drawHead draws an arrowhead at (x2, y2) pointing along the line from
	// (x1, y1).
	function drawHead(g, x1, y1, x2, y2) {
		const a = Math.atan2(y2 - y1, x2 - x1);
		const len = 10;
		const half = 4;
		const bx = x2 - len * Math.cos(a);
		const by = y2 - len * Math.sin(a);
		const px = half * Math.sin(a);
		const py = -half * Math.cos(a);
		const points = [[x2, y2], [bx + px, by + py], [bx - px, by - py]].map(pt => pt.join(',')).join(' ');
		el('polygon', { class: 'head', points }, g);
	}

	function drawCross(g, x, y, r) {
		el('line', { class: 'cross', x1: x - r, y1: y - r, x2: x + r, y2: y + r }, g);
		el('line', { class: 'cross', x1: x - r, y1: y + r, x2: x + r, y2: y - r }, g);
	}

	// noteText is what a note says: the QP (and the device, for a
	// device's own event) and the event as the trace prints it.
	function noteText(row) {
		const e = row.ev;
		const who = (row.device && e.device ? e.device + ' ' : '') + 'QP ' + hex(e.qp);
		return who + ': ' + eventText(e);
	}

	// drawNote draws an event beside its lane: a dot on the lane and a box
	// with the text toward the middle of the diagram (to the right of
	// every lane but the last, which has it on its left). A note longer
	// than the space between lanes is cut; its title has all of it.
	function drawNote(row, y, h) {
		const g = el('g', { class: 'note ' + (row.device ? 'device' : 'inferred') }, svg);
		const x = laneX(row.lane);
		const cy = y + h / 2;
		const full = noteText(row);
		const source = row.device ? 'from the device\'s trace at ' + seconds(row.ev.time) + ' s' : 'inferred by explain';
		el('title', {}, g).textContent = full + ' (' + source + ')';
		el('circle', { cx: x, cy, r: Math.min(4, h / 2) }, g);
		if (h < 12) {
			return;
		}
		const maxChars = Math.floor((LANE_GAP - 40) / NOTE_CHAR);
		const shown = full.length > maxChars ? full.slice(0, maxChars - 1) + '…' : full;
		const width = shown.length * NOTE_CHAR + 10;
		const leftward = row.lane === lanes.length - 1 && lanes.length > 1;
		const bx = leftward ? x - 8 - width : x + 8;
		el('rect', { x: bx, y: cy - 8, width, height: 16, rx: 3 }, g);
		text(shown, { x: bx + 5, y: cy + 4 }, g);
	}

	// drawGap draws a pause in time across the lanes: "… 67.1 ms …".
	function drawGap(row, y, h) {
		const g = el('g', { class: 'gap' }, svg);
		el('rect', { x: MARGIN, y, width: WIDTH - MARGIN, height: h }, g);
		lanes.forEach((_, i) => {
			el('line', { x1: laneX(i), y1: y, x2: laneX(i), y2: y + h }, g);
		});
		const mid = lanes.length > 1 ? (laneX(0) + laneX(lanes.length - 1)) / 2 : laneX(0) + 80;
		text('… ' + shortDuration(row.dt) + ' …', { x: mid, y: y + h / 2 + 4, 'text-anchor': 'middle' }, g);
	}

	// drawLaneHeads writes each lane's address, and the margin's column
	// names, in the sticky bar over the diagram.
	function drawLaneHeads() {
		laneHead.style.width = WIDTH + 'px';
		canvas.style.width = WIDTH + 'px';
		const span = (cls, content, left) => {
			const s = document.createElement('span');
			s.className = cls;
			s.textContent = content;
			s.style.left = left + 'px';
			laneHead.appendChild(s);
		};
		span('margin', '#', 8);
		span('margin', 'time (s)', 56);
		lanes.forEach((addr, i) => span('lane', addr, laneX(i)));
	}

	// ---- Selection and the details panel -----------------------------

	const details = document.getElementById('details');

	function select(i) {
		if (i < 0 || i >= packets.length) {
			return;
		}
		view.selected = i;
		showDetails(i);
		scrollToPacket(i);
		updatePosition();
		drawRateCursor();
		render();
	}

	// scrollToPacket scrolls the packet's row into view when it is not,
	// to a third of the way down.
	function scrollToPacket(i) {
		const k = view.packetRow.get(i);
		if (k === undefined) {
			return;
		}
		const [top, bottom] = visibleRange();
		const y = view.tops[k];
		const h = rowHeight('pkt');
		if (y < top || y + h > bottom) {
			scrollToY(y, 1 / 3);
		}
	}

	function html(tag, content, attrs) {
		const e = document.createElement(tag);
		if (content !== undefined) {
			e.textContent = content;
		}
		for (const [k, v] of Object.entries(attrs || {})) {
			e.setAttribute(k, v);
		}
		return e;
	}

	function showDetails(i) {
		const p = packets[i];
		const title = html('h2', 'Packet ' + p.index + ': ' + shortOpcode(p));
		if (p.anomaly) {
			title.appendChild(html('span', p.anomaly, { class: 'badge ' + anomalyClass(p.anomaly) }));
		}
		const parts = [title, packetFacts(p), html('code', p.fields, { class: 'fields' }), html('p', p.text, { class: 'text' })];
		if (p.events && p.events.length) {
			parts.push(html('h3', 'Events'), eventList(p.events));
		}
		if (p.after && p.after.length) {
			parts.push(html('h3', 'State after the packet'), stateTable(p.after, previousState(i)));
		}
		details.replaceChildren(...parts);
	}

	function packetFacts(p) {
		const facts = [
			['time', seconds(p.time) + ' s'],
			['from → to', p.src + ' → ' + p.dst],
			['opcode', p.opcode],
			['QP', hex(p.dest_qp)],
			['PSN', String(p.psn)],
		];
		if (p.conn >= 0 && conns[p.conn]) {
			facts.push(['connection', connName(conns[p.conn])]);
		}
		if (isLost(p)) {
			facts.push(['lost', 'sent, and never arrived']);
		}
		const dl = html('dl');
		for (const [k, v] of facts) {
			dl.append(html('dt', k), html('dd', v));
		}
		return dl;
	}

	function eventList(events) {
		const ul = html('ul');
		for (const e of events) {
			ul.appendChild(html('li', 'QP ' + hex(e.qp) + ': ' + eventText(e)));
		}
		return ul;
	}

	// The rows of the state table: a label and how to read it from an
	// EndState. An end that has sent no request has no requester state
	// to show, and one that was sent none no responder state: a dash.
	const asker = read => s => s.requester_known ? read(s) : '–';
	const answerer = read => s => s.responder_known ? read(s) : '–';
	const stateRows = [
		['next PSN', asker(s => s.next_psn)],
		['oldest unacked PSN', asker(s => s.unacked)],
		['outstanding', asker(s => s.outstanding)],
		['READs/atomics waiting', asker(s => s.reads)],
		['recovery', s => s.recovery || '–'],
		['expected PSN', answerer(s => s.expected_psn)],
		['MSN', answerer(s => s.msn)],
		['NAK state', s => s.nak_state || '–'],
	];

	// previousState is each end's state before packet i: after the last
	// packet of its connection before it, by end name. The state table
	// marks what the packet changed.
	function previousState(i) {
		const conn = packets[i].conn;
		const before = new Map();
		for (let j = i - 1; j >= 0 && conn >= 0; j--) {
			if (packets[j].conn === conn && packets[j].after) {
				for (const s of packets[j].after) {
					if (!before.has(s.end)) {
						before.set(s.end, s);
					}
				}
				if (before.size >= 2) {
					break;
				}
			}
		}
		return before;
	}

	function stateTable(after, before) {
		const table = html('table');
		const head = html('tr');
		head.appendChild(html('th', ''));
		after.forEach((s, k) => head.appendChild(html('th', s.end + (k === 0 ? ' (sender)' : ' (receiver)'), { scope: 'col' })));
		table.appendChild(head);
		for (const [label, read] of stateRows) {
			const tr = html('tr');
			tr.appendChild(html('th', label, { scope: 'row' }));
			for (const s of after) {
				const td = html('td', String(read(s)));
				const old = before.get(s.end);
				if (old && read(old) !== read(s)) {
					td.className = 'changed';
					td.title = 'was ' + read(old);
				}
				tr.appendChild(td);
			}
			table.appendChild(tr);
		}
		return table;
	}

	// ---- Moving around -----------------------------------------------

	// step returns the next packet from i in direction dir (+1 or -1) that
	// the filter shows and that ok accepts, or -1.
	function step(i, dir, ok) {
		for (let j = i + dir; j >= 0 && j < packets.length; j += dir) {
			if (shows(packets[j]) && ok(packets[j])) {
				return j;
			}
		}
		return -1;
	}

	function move(dir, ok) {
		const from = view.selected >= 0 ? view.selected : (dir > 0 ? -1 : packets.length);
		const j = step(from, dir, ok);
		if (j >= 0) {
			select(j);
		} else {
			updatePosition(ok === isAnomaly ? 'no more anomalies that way' : 'no more packets that way');
		}
	}

	const any = () => true;
	const isAnomaly = p => Boolean(p.anomaly);

	const anomalies = packets.filter(isAnomaly).length;

	function updatePosition(note) {
		const shown = view.packetRow.size;
		let s = view.selected >= 0 ? 'packet ' + packets[view.selected].index + ' · ' : '';
		s += plural(shown, 'packet') + ' shown · ' + plural(anomalies, 'anomaly', 'anomalies');
		if (note) {
			s += ' · ' + note;
		}
		document.getElementById('position').textContent = s;
	}

	// setZoom changes the rows' heights, keeping the row at the middle of
	// the view where it is.
	function setZoom(z) {
		z = Math.min(4, Math.max(0.15, z));
		if (z === view.zoom) {
			return;
		}
		const [top, bottom] = visibleRange();
		const k = rowAt((top + bottom) / 2);
		const offset = (top + bottom) / 2 - view.tops[k];
		const scale = z / view.zoom;
		view.zoom = z;
		layOut();
		scrollToY(view.tops[k] + offset * scale, 1 / 2);
		render();
	}

	function setFilter(value) {
		const [kind, n] = value.split(':');
		view.filter = kind === 'c' ? { kind: 'conn', conn: Number(n) } : kind === 'q' ? { kind: 'qp', qp: Number(n) } : { kind: 'all' };
		buildRows();
		updatePosition();
		scrollToPacket(view.selected);
		render();
	}

	// fillFilter offers every connection and every destination QP.
	function fillFilter() {
		const select = document.getElementById('qp-filter');
		select.appendChild(new Option('all', 'all'));
		if (conns.length) {
			const group = html('optgroup', undefined, { label: 'connection' });
			conns.forEach((c, k) => group.appendChild(new Option(connName(c), 'c:' + k)));
			select.appendChild(group);
		}
		const qps = [...new Set(packets.map(p => p.dest_qp))].sort((a, b) => a - b);
		if (qps.length) {
			const group = html('optgroup', undefined, { label: 'packets to QP' });
			qps.forEach(q => group.appendChild(new Option(hex(q), 'q:' + q)));
			select.appendChild(group);
		}
		select.addEventListener('change', () => setFilter(select.value));
	}

	function wireControls() {
		const on = (id, f) => document.getElementById(id).addEventListener('click', f);
		on('zoom-in', () => setZoom(view.zoom * 1.25));
		on('zoom-out', () => setZoom(view.zoom / 1.25));
		on('next-anomaly', () => move(1, isAnomaly));
		on('prev-anomaly', () => move(-1, isAnomaly));
		svg.addEventListener('click', e => {
			const g = e.target.closest('.pkt');
			if (g) {
				select(Number(g.dataset.i));
			}
		});
		diagram.addEventListener('scroll', scheduleRender, { passive: true });
		// ctrl+wheel zooms the diagram instead of the page.
		diagram.addEventListener('wheel', e => {
			if (e.ctrlKey) {
				e.preventDefault();
				setZoom(view.zoom * (e.deltaY < 0 ? 1.15 : 1 / 1.15));
			}
		}, { passive: false });
		document.addEventListener('keydown', onKey);
		window.addEventListener('resize', () => {
			scheduleRender();
			renderRates();
		});
	}

	const keys = {
		n: () => move(1, any),
		ArrowDown: () => move(1, any),
		ArrowRight: () => move(1, any),
		p: () => move(-1, any),
		ArrowUp: () => move(-1, any),
		ArrowLeft: () => move(-1, any),
		a: () => move(1, isAnomaly),
		A: () => move(-1, isAnomaly),
		'+': () => setZoom(view.zoom * 1.25),
		'-': () => setZoom(view.zoom / 1.25),
	};

	function onKey(e) {
		// Leave the keys to the filter's list while it has the focus, and
		// leave the browser's own shortcuts alone.
		if (e.target instanceof HTMLSelectElement || e.ctrlKey || e.metaKey || e.altKey) {
			return;
		}
		const f = keys[e.key];
		if (f) {
			e.preventDefault();
			f();
		}
	}

	// ---- The legend ------------------------------------------------------

	const legendItems = [
		['', 'packet'],
		['a-nak', 'NAK'],
		['a-rnr', 'RNR NAK'],
		['a-retransmission', 'retransmission'],
		['a-timeout', 'sent again after a timeout'],
		['a-duplicate', 'duplicate'],
		['a-out-of-sequence', 'out of sequence'],
		['a-lost lost', 'lost: sent, never arrived'],
		['a-cnp', 'CNP (congestion notification)'],
		['a-error', 'error, bad ICRC, malformed'],
		['a-cut', 'cut short by the capture: unreadable'],
	];

	function drawLegend() {
		const list = document.getElementById('legend-list');
		for (const [cls, label] of legendItems) {
			const s = el('svg', { width: 60, height: 16 });
			const g = el('g', { class: 'sample ' + cls }, s);
			drawArrow(g, 4, 5, 56, 11, cls.includes('lost'));
			list.appendChild(legendEntry(s, label));
		}
		for (const [cls, label] of [['inferred', 'event inferred by explain'], ['device', 'event from a device\'s trace']]) {
			const s = el('svg', { width: 60, height: 16 });
			const g = el('g', { class: 'note ' + cls }, s);
			el('rect', { x: 10, y: 1, width: 46, height: 14, rx: 3 }, g);
			el('circle', { cx: 4, cy: 8, r: 4 }, g);
			list.appendChild(legendEntry(s, label));
		}
		list.appendChild(legendEntry(html('span', '… 67 ms …', { class: 'gap-sample' }), 'a pause: time passes'));
	}

	function legendEntry(sample, label) {
		const li = html('li');
		li.append(sample, html('span', label));
		return li;
	}

	// ---- The rate chart --------------------------------------------------

	const rates = document.getElementById('rates');
	const chart = document.getElementById('rate-chart');
	const palette = ['#1e88e5', '#43a047', '#e53935', '#8e24aa', '#fb8c00', '#00897b', '#6d4c41', '#3949ab'];

	// rateSeries gathers each QP's rate changes and the rates after its
	// CNPs, by device and QP, in time order.
	function rateSeries() {
		const byQP = new Map();
		for (const e of deviceEvents) {
			if (e.kind !== 'rate_change' && e.kind !== 'cnp_received') {
				continue;
			}
			const key = (e.device ? e.device + ' ' : '') + 'QP ' + hex(e.qp);
			if (!byQP.has(key)) {
				byQP.set(key, []);
			}
			byQP.get(key).push({ time: e.time, rate: e.rate, cnp: e.kind === 'cnp_received' });
		}
		return [...byQP].map(([label, points], k) => ({ label, points, color: palette[k % palette.length] }));
	}

	const series = rateSeries();

	// The chart spans the time of the rate events, and a tenth more each
	// side: DCQCN acts over microseconds to milliseconds, which would be
	// lost on the scale of a whole capture. Loops, not Math.max(...array),
	// which has a limit on its arguments.
	const ratePoints = series.flatMap(s => s.points);
	const maxRate = niceCeil(ratePoints.reduce((r, p) => Math.max(r, p.rate), 1));
	const chartSpan = (function () {
		const first = ratePoints.reduce((t, p) => Math.min(t, p.time), Infinity);
		const last = ratePoints.reduce((t, p) => Math.max(t, p.time), -Infinity);
		const pad = Math.max((last - first) / 10, 1e3);
		return { from: Math.max(0, first - pad), to: last + pad };
	})();
	const chartBox = { left: 80, right: 24, top: 26, bottom: 22, height: 170 };

	// niceCeil rounds x up to 1, 2, 2.5 or 5 times a power of ten, so that
	// the rate axis's top and middle are round numbers: 8.75 Gb/s gives
	// 10 Gb/s, ticks at 0, 5 and 10.
	function niceCeil(x) {
		const power = Math.pow(10, Math.floor(Math.log10(x)));
		return [1, 2, 2.5, 5, 10].map(m => m * power).find(v => v >= x);
	}

	function chartScales() {
		const width = Math.max(300, rates.clientWidth - 24);
		const plotW = width - chartBox.left - chartBox.right;
		const plotH = chartBox.height - chartBox.top - chartBox.bottom;
		const { from, to } = chartSpan;
		return {
			width,
			x: t => chartBox.left + ((t - from) / (to - from)) * plotW,
			y: r => chartBox.top + plotH - (r / maxRate) * plotH,
		};
	}

	// timeTicks returns the chart's five time ticks with their labels, in
	// the unit of the chart's end and to the digit that tells them apart:
	// "68.00 ms", "68.04 ms".
	function timeTicks() {
		const { from, to } = chartSpan;
		const [size, unit] = [[1e9, 's'], [1e6, 'ms'], [1e3, 'µs'], [1, 'ns']].find(([size]) => to >= size) || [1, 'ns'];
		const step = (to - from) / 4;
		const digits = Math.min(6, Math.max(0, -Math.floor(Math.log10(step / size))));
		return [0, 1, 2, 3, 4].map(k => {
			const t = from + k * step;
			return { t, label: (t / size).toFixed(digits) + ' ' + unit };
		});
	}

	// renderRates draws each QP's rate as a step line over time, a dot where a CNP arrived, and a cursor at the selected packet.
	function renderRates() {
		if (series.length === 0) {
			return;
		}
		rates.hidden = false;
		const sc = chartScales();
		chart.replaceChildren();
		chart.setAttribute('width', sc.width);
		chart.setAttribute('height', chartBox.height);
		drawRateAxes(sc);
		series.forEach((s, k) => drawSeries(s, k, sc));
		drawRateCursor();
	}

	function drawRateAxes(sc) {
		const bottom = sc.y(0);
		for (const f of [0, 0.5, 1]) {
			const r = maxRate * f;
			el('line', { class: f ? 'grid' : 'axis', x1: chartBox.left, y1: sc.y(r), x2: sc.width - chartBox.right, y2: sc.y(r) }, chart);
			text(rate(r), { class: 'tick', x: chartBox.left - 6, y: sc.y(r) + 4, 'text-anchor': 'end' }, chart);
		}
		el('line', { class: 'axis', x1: chartBox.left, y1: chartBox.top, x2: chartBox.left, y2: bottom }, chart);
		timeTicks().forEach(({ t, label }, k) => {
			const anchor = k === 0 ? 'start' : k === 4 ? 'end' : 'middle';
			text(label, { class: 'tick', x: sc.x(t), y: bottom + 15, 'text-anchor': anchor }, chart);
		});
	}

	function drawSeries(s, k, sc) {
		let d = '';
		s.points.forEach((p, j) => {
			d += j === 0 ? `M${sc.x(p.time)},${sc.y(p.rate)}` : `H${sc.x(p.time)}V${sc.y(p.rate)}`;
		});
		d += `H${sc.x(chartSpan.to)}`; // the last rate holds
		el('path', { class: 'series', d, stroke: s.color }, chart);
		for (const p of s.points.filter(p => p.cnp)) {
			const dot = el('circle', { class: 'cnp-mark', cx: sc.x(p.time), cy: sc.y(p.rate), r: 3.5 }, chart);
			el('title', {}, dot).textContent = 'CNP received at ' + seconds(p.time) + ' s: rate ' + rate(p.rate);
		}
		const x = chartBox.left + 10 + k * 170;
		el('rect', { x, y: 6, width: 12, height: 4, fill: s.color }, chart);
		text(s.label, { class: 'tick', x: x + 16, y: 12 }, chart);
	}

	function drawRateCursor() {
		const old = document.getElementById('rate-cursor');
		if (old) {
			old.remove();
		}
		if (series.length === 0 || view.selected < 0) {
			return;
		}
		const t = packets[view.selected].time;
		if (t < chartSpan.from || t > chartSpan.to) {
			return;
		}
		const sc = chartScales();
		el('line', { id: 'rate-cursor', x1: sc.x(t), y1: chartBox.top, x2: sc.x(t), y2: sc.y(0) }, chart);
	}

	// ---- The header --------------------------------------------------

	function fillHeader() {
		const c = report.counts || {};
		const parts = [plural(c.roce_packets || 0, 'RoCE packet'), plural(c.other_frames || 0, 'other frame')];
		if (c.bad_icrc) {
			parts.push(c.bad_icrc + ' with a bad ICRC');
		}
		if (c.malformed) {
			parts.push(plural(c.malformed, 'malformed packet'));
		}
		if (c.cut_short) {
			parts.push(c.cut_short + ' cut short by the capture (ICRC not checked)');
		}
		if (c.cut_unread) {
			parts.push(c.cut_unread + ' cut too short to read');
		}
		parts.push(plural(lanes.length, 'endpoint'), plural(conns.length, 'connection'));
		document.getElementById('counts').textContent = parts.join(', ');
		const list = document.getElementById('summaries');
		for (const conn of conns) {
			list.appendChild(html('li', summaryText(conn)));
		}
	}

	// ---- Start ---------------------------------------------------------

	fillHeader();
	fillFilter();
	drawLaneHeads();
	drawLegend();
	wireControls();
	buildRows();
	updatePosition();
	render();
	renderRates();
})();
