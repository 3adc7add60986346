package logscan

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	// IANA names work where the system has no zoneinfo (slim engine
	// containers): the binary carries the database (~450 KB).
	_ "time/tzdata"
)

// ParseZone reads the zone a server log's timestamps are in: "" or "Local"
// (this machine's local time, which is what SGLang prints), "UTC", an IANA
// name ("Europe/Berlin"), or a fixed offset east of UTC in ISO 8601 form,
// optionally after "UTC" or "GMT": "+02:00", "-0700", "+5", "UTC+05:30".
// (POSIX TZ strings count the other way; they are not accepted.)
func ParseZone(s string) (*time.Location, error) {
	t := strings.TrimSpace(s)
	switch strings.ToLower(t) {
	case "", "local":
		return time.Local, nil
	case "utc", "z", "gmt":
		return time.UTC, nil
	}
	off := t
	for _, p := range []string{"UTC", "GMT", "utc", "gmt"} {
		off = strings.TrimPrefix(off, p)
	}
	if off != "" && (off[0] == '+' || off[0] == '-') {
		secs, err := parseOffset(off)
		if err != nil {
			return nil, fmt.Errorf("time zone %q: %w", s, err)
		}
		return time.FixedZone("UTC"+formatOffset(secs), secs), nil
	}
	loc, err := time.LoadLocation(t)
	if err != nil {
		return nil, fmt.Errorf("time zone %q: want an IANA name (Europe/Berlin), UTC, Local or an offset (+02:00): %w", s, err)
	}
	return loc, nil
}

// parseOffset reads ±HH, ±HHMM or ±HH:MM.
func parseOffset(s string) (int, error) {
	sign := 1
	if s[0] == '-' {
		sign = -1
	}
	body := s[1:]
	hh, mm := body, ""
	switch {
	case strings.Contains(body, ":"):
		hh, mm, _ = strings.Cut(body, ":")
	case len(body) == 4:
		hh, mm = body[:2], body[2:]
	}
	h, err := strconv.Atoi(hh)
	if err != nil || hh == "" || len(hh) > 2 || h > 14 {
		return 0, fmt.Errorf("offset %q: want ±HH, ±HHMM or ±HH:MM, hours 0-14", s)
	}
	m := 0
	if mm != "" {
		if m, err = strconv.Atoi(mm); err != nil || len(mm) != 2 || m > 59 {
			return 0, fmt.Errorf("offset %q: minutes %q: want 00-59", s, mm)
		}
	}
	return sign * (h*3600 + m*60), nil
}

func formatOffset(secs int) string {
	sign := '+'
	if secs < 0 {
		sign, secs = '-', -secs
	}
	return fmt.Sprintf("%c%02d:%02d", sign, secs/3600, secs%3600/60)
}

// DescribeZone states a zone for people: "Local (CET, UTC+01:00 at t)",
// "UTC", "Europe/Berlin (CEST, UTC+02:00 at t)", "UTC+05:30". t picks the
// offset of zones with daylight saving time.
func DescribeZone(loc *time.Location, t time.Time) string {
	name, off := t.In(loc).Zone()
	switch {
	case loc == time.UTC:
		return "UTC"
	case strings.HasPrefix(loc.String(), "UTC+") || strings.HasPrefix(loc.String(), "UTC-"):
		return loc.String()
	}
	return fmt.Sprintf("%s (%s, UTC%s)", loc.String(), name, formatOffset(off))
}
