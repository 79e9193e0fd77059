package packaging

import (
	"bytes"
	"debug/elf"
	"debug/macho"
	"debug/pe"
	"encoding/binary"
	"fmt"

	"github.com/etcdmember/kubectl-etcdmember/hack/dist/release"
)

// versionSymbol is the variable the Makefile's LDFLAGS set with -X.
const versionSymbol = modulePath + "/internal/version.Version"

// region is a loaded section: where it sits in memory and its bytes in the file.
type region struct {
	addr uint64
	data func() ([]byte, error)
	size uint64
}

// stampedVersion reads internal/version.Version out of a binary of any release platform without
// running it: the symbol's address gives the string header (pointer, length; all release targets
// are 64-bit little-endian), and the pointer the bytes. -trimpath keeps -ldflags out of the build
// info, and a search for the bytes could match the commit in vcs.revision, so this is the check
// that each cross-built binary really carries the stamp.
func stampedVersion(p release.Platform, data []byte) (string, error) {
	var regions []region
	var addr uint64
	found := false
	switch p.OS {
	case "linux":
		f, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return "", err
		}
		syms, err := f.Symbols()
		if err != nil {
			return "", fmt.Errorf("symbols: %w", err)
		}
		for _, s := range syms {
			if s.Name == versionSymbol {
				addr, found = s.Value, true
			}
		}
		for _, s := range f.Sections {
			if s.Type != elf.SHT_NOBITS {
				regions = append(regions, region{addr: s.Addr, size: s.Size, data: s.Data})
			}
		}
	case "darwin":
		f, err := macho.NewFile(bytes.NewReader(data))
		if err != nil {
			return "", err
		}
		if f.Symtab == nil {
			return "", fmt.Errorf("no symbol table")
		}
		for _, s := range f.Symtab.Syms {
			if s.Name == versionSymbol {
				addr, found = s.Value, true
			}
		}
		for _, s := range f.Sections {
			regions = append(regions, region{addr: s.Addr, size: s.Size, data: s.Data})
		}
	case "windows":
		f, err := pe.NewFile(bytes.NewReader(data))
		if err != nil {
			return "", err
		}
		oh, ok := f.OptionalHeader.(*pe.OptionalHeader64)
		if !ok {
			return "", fmt.Errorf("not a 64-bit PE")
		}
		for _, s := range f.Symbols {
			if s.Name == versionSymbol && s.SectionNumber > 0 && int(s.SectionNumber) <= len(f.Sections) {
				sec := f.Sections[s.SectionNumber-1]
				addr, found = oh.ImageBase+uint64(sec.VirtualAddress)+uint64(s.Value), true
			}
		}
		for _, s := range f.Sections {
			regions = append(regions, region{addr: oh.ImageBase + uint64(s.VirtualAddress), size: uint64(s.Size), data: s.Data})
		}
	default:
		return "", fmt.Errorf("unknown os %s", p.OS)
	}
	if !found {
		return "", fmt.Errorf("no symbol %s (was the binary stripped?)", versionSymbol)
	}
	header, err := read(regions, addr, 16)
	if err != nil {
		return "", fmt.Errorf("string header: %w", err)
	}
	ptr, n := binary.LittleEndian.Uint64(header[:8]), binary.LittleEndian.Uint64(header[8:])
	if n == 0 {
		return "", nil
	}
	s, err := read(regions, ptr, n)
	if err != nil {
		return "", fmt.Errorf("string data: %w", err)
	}
	return string(s), nil
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
