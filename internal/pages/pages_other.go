//go:build !linux

package pages

import "errors"

func populate(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return errors.ErrUnsupported
}

func resident(b []byte) (present, pages int, err error) {
	return 0, 0, errors.ErrUnsupported
}

func memory() uint64 { return 0 }
