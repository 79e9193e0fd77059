package packaging

import (
	"bytes"
	"debug/elf"
	"debug/macho"
	"debug/pe"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/etcdmember/kubectl-etcdmember/hack/dist/release"
)

// region is a loaded section: where it sits in memory and its bytes in the file.
type region struct {
	addr uint64
	data func() ([]byte, error)
	size uint64
}

// stampsVersion tells whether a binary of any release platform holds version in a string
// variable, without running it. The release binaries are stripped, so no symbol leads to
// internal/version.Version, and -trimpath keeps -ldflags out of the build info; a search for the
// bytes alone could match a constant. What -X leaves is a string header (pointer, length; every
// release target is 64-bit little-endian) in the binary's data that points at those bytes, so the
// check looks for such a header.
func stampsVersion(p release.Platform, data []byte, version string) (bool, error) {
	img, err := parseBinary(p, data)
	if err != nil {
		return false, err
	}
	regions := img.regions
	want := uint64(len(version))
	for _, r := range regions {
		sec, err := r.data()
		if err != nil {
			return false, err
		}
		for off := 0; off+16 <= len(sec); off += 8 {
			if binary.LittleEndian.Uint64(sec[off+8:]) != want {
				continue
			}
			if s, err := read(regions, binary.LittleEndian.Uint64(sec[off:]), want); err == nil && string(s) == version {
				return true, nil
			}
		}
	}
	return false, nil
}

// binaryFile is what the packaging tests read of a binary of any release platform: the names in its
// symbol table (none once stripped: no table on Linux and Windows, only libSystem's dynamic
// imports on macOS) and its loaded sections that hold bytes in the file.
type binaryFile struct {
	symbols []string
	regions []region
}

func parseBinary(p release.Platform, data []byte) (binaryFile, error) {
	var img binaryFile
	switch p.OS {
	case "linux":
		f, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return img, err
		}
		syms, err := f.Symbols()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return img, err
		}
		for _, s := range syms {
			img.symbols = append(img.symbols, s.Name)
		}
		for _, s := range f.Sections {
			if s.Type != elf.SHT_NOBITS && s.Flags&elf.SHF_ALLOC != 0 {
				img.regions = append(img.regions, region{addr: s.Addr, size: s.Size, data: s.Data})
			}
		}
	case "darwin":
		f, err := macho.NewFile(bytes.NewReader(data))
		if err != nil {
			return img, err
		}
		if f.Symtab != nil {
			for _, s := range f.Symtab.Syms {
				img.symbols = append(img.symbols, s.Name)
			}
		}
		for _, s := range f.Sections {
			if s.Offset != 0 {
				img.regions = append(img.regions, region{addr: s.Addr, size: s.Size, data: s.Data})
			}
		}
	case "windows":
		f, err := pe.NewFile(bytes.NewReader(data))
		if err != nil {
			return img, err
		}
		oh, ok := f.OptionalHeader.(*pe.OptionalHeader64)
		if !ok {
			return img, fmt.Errorf("not a 64-bit PE")
		}
		for _, s := range f.Symbols {
			img.symbols = append(img.symbols, s.Name)
		}
		for _, s := range f.Sections {
			img.regions = append(img.regions, region{addr: oh.ImageBase + uint64(s.VirtualAddress), size: uint64(s.Size), data: s.Data})
		}
	default:
		return img, fmt.Errorf("unknown os %s", p.OS)
	}
	return img, nil
}

func read(regions []region, addr, n uint64) ([]byte, error) {
	for _, r := range regions {
		if addr < r.addr || addr+n > r.addr+r.size {
			continue
		}
		data, err := r.data()
		if err != nil {
			return nil, err
		}
		if off := addr - r.addr; off+n <= uint64(len(data)) {
			return data[off : off+n], nil
		}
	}
	return nil, fmt.Errorf("%d bytes at %#x are in no section", n, addr)
}

// TestStampCheckCanFail: the check above finds the version the binaries carry and no other of the
// same length, so a binary stamped with a stale version would fail it.
func TestStampCheckCanFail(t *testing.T) {
	version := ExpectedVersion(t)
	p := release.Platforms[0]
	bin := readArchive(t, p)[p.BinaryName()].Data
	other := []byte(version)
	other[len(other)-1]++
	for v, want := range map[string]bool{version: true, string(other): false} {
		if got, err := stampsVersion(p, bin, v); err != nil || got != want {
			t.Errorf("%s: stampsVersion(%q) = %v (err %v), want %v", p, v, got, err, want)
		}
	}
}
