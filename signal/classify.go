package signal

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
)

// statusOverloaded is the 529 a provider answers when it is overloaded
// (Anthropic's overloaded_error): not an HTTP standard code, and not
// the caller's fault.
const statusOverloaded = 529

// ClassifyStatus classifies an HTTP status: 1xx-3xx succeed; 408, 418, 429,
// 500, 502, 503, 504 and 529 (overloaded) are transient; every other
// status is permanent.
func ClassifyStatus(status int) Class {
	switch {
	case status >= 100 && status < 400:
		return ClassSuccess
	}
	switch status {
	case 408, 418, 429, 500, 502, 503, 504, statusOverloaded:
		return ClassTransient
	}
	return ClassPermanent
}

// Classify classifies a call's outcome: err when it is not nil, else
// status. See ClassifyStatus and ClassifyError.
func Classify(status int, err error) Class {
	if err != nil {
		c, _, _ := classifyErr(err)
		return c
	}
	return ClassifyStatus(status)
}

// ClassifyError classifies a transport error. It returns ClassCanceled for
// context.Canceled; ClassTransient for timeouts (context.DeadlineExceeded,
// a net.Error whose Timeout is true) and network errors (*net.OpError,
// *net.DNSError, connection reset or refused, a broken pipe, an unexpected
// EOF); ClassPermanent for anything else, which is not the network's doing.
// unknown is set when the request may have reached the provider: every
// transient error except a failure to dial or resolve.
func ClassifyError(err error) (c Class, timeout, unknown bool) {
	return classifyErr(err)
}

func classifyErr(err error) (Class, bool, bool) {
	if errors.Is(err, context.Canceled) {
		return ClassCanceled, false, false
	}
	// Before the request left: dialing and resolving failed.
	var op *net.OpError
	notSent := errors.As(err, &op) && op.Op == "dial"
	var dns *net.DNSError
	if errors.As(err, &dns) {
		notSent = true
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		notSent = true
	}
	timeout := errors.Is(err, context.DeadlineExceeded)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		timeout = true
	}
	if timeout {
		return ClassTransient, true, !notSent
	}
	if op != nil || dns != nil ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNABORTED) {
		return ClassTransient, false, !notSent
	}
	return ClassPermanent, false, false
}
