package cm

import "fmt"

// RejReason is a REJ's reason code (IBTA Vol 1 §12.6.7.2, Table 109). The
// names follow Linux's enum ib_cm_rej_reason: RejInvalidServiceID is
// IB_CM_REJ_INVALID_SERVICE_ID.
type RejReason uint16

// REJ reasons. rdma_cm sees mostly RejInvalidServiceID (nobody listens on
// the port), RejStaleConn (a reused QPN or comm ID still in timewait),
// RejInvalidGID (the REQ's path does not resolve on the receiver),
// RejTimeout (the sender gave up waiting) and RejConsumerDefined (the
// application rejected; rdma_reject).
const (
	RejNoQP                      RejReason = 1
	RejNoEEC                     RejReason = 2
	RejNoResources               RejReason = 3
	RejTimeout                   RejReason = 4
	RejUnsupported               RejReason = 5
	RejInvalidCommID             RejReason = 6
	RejInvalidCommInstance       RejReason = 7
	RejInvalidServiceID          RejReason = 8
	RejInvalidTransportType      RejReason = 9
	RejStaleConn                 RejReason = 10
	RejRDCNotExist               RejReason = 11
	RejInvalidGID                RejReason = 12
	RejInvalidLID                RejReason = 13
	RejInvalidSL                 RejReason = 14
	RejInvalidTrafficClass       RejReason = 15
	RejInvalidHopLimit           RejReason = 16
	RejInvalidPacketRate         RejReason = 17
	RejInvalidAltGID             RejReason = 18
	RejInvalidAltLID             RejReason = 19
	RejInvalidAltSL              RejReason = 20
	RejInvalidAltTrafficClass    RejReason = 21
	RejInvalidAltHopLimit        RejReason = 22
	RejInvalidAltPacketRate      RejReason = 23
	RejPortCMRedirect            RejReason = 24
	RejPortRedirect              RejReason = 25
	RejInvalidMTU                RejReason = 26
	RejInsufficientRespResources RejReason = 27
	RejConsumerDefined           RejReason = 28
	RejInvalidRNRRetry           RejReason = 29
	RejDuplicateLocalCommID      RejReason = 30
	RejInvalidClassVersion       RejReason = 31
	RejInvalidFlowLabel          RejReason = 32
	RejInvalidAltFlowLabel       RejReason = 33
	RejVendorOptionNotSupported  RejReason = 35
)

var rejReasonNames = map[RejReason]string{
	RejNoQP:                      "no QP",
	RejNoEEC:                     "no EEC",
	RejNoResources:               "no resources",
	RejTimeout:                   "timeout",
	RejUnsupported:               "unsupported request",
	RejInvalidCommID:             "invalid comm ID",
	RejInvalidCommInstance:       "invalid comm instance",
	RejInvalidServiceID:          "invalid service ID",
	RejInvalidTransportType:      "invalid transport type",
	RejStaleConn:                 "stale connection",
	RejRDCNotExist:               "RDC does not exist",
	RejInvalidGID:                "invalid GID",
	RejInvalidLID:                "invalid LID",
	RejInvalidSL:                 "invalid SL",
	RejInvalidTrafficClass:       "invalid traffic class",
	RejInvalidHopLimit:           "invalid hop limit",
	RejInvalidPacketRate:         "invalid packet rate",
	RejInvalidAltGID:             "invalid alternate GID",
	RejInvalidAltLID:             "invalid alternate LID",
	RejInvalidAltSL:              "invalid alternate SL",
	RejInvalidAltTrafficClass:    "invalid alternate traffic class",
	RejInvalidAltHopLimit:        "invalid alternate hop limit",
	RejInvalidAltPacketRate:      "invalid alternate packet rate",
	RejPortCMRedirect:            "port CM redirect",
	RejPortRedirect:              "port redirect",
	RejInvalidMTU:                "invalid MTU",
	RejInsufficientRespResources: "insufficient responder resources",
	RejConsumerDefined:           "consumer defined",
	RejInvalidRNRRetry:           "invalid RNR retry",
	RejDuplicateLocalCommID:      "duplicate local comm ID",
	RejInvalidClassVersion:       "invalid class version",
	RejInvalidFlowLabel:          "invalid flow label",
	RejInvalidAltFlowLabel:       "invalid alternate flow label",
	RejVendorOptionNotSupported:  "vendor option not supported",
}

// String returns the reason in words, like "invalid service ID", or
// "reason 34" for a code Linux does not name.
func (r RejReason) String() string {
	if s, ok := rejReasonNames[r]; ok {
		return s
	}
	return fmt.Sprintf("reason %d", uint16(r))
}
