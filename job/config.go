package job

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicerl/sluice/store"
)

// ErrInvalidImport is wrapped by ParseImport for a file it cannot use; the
// message names the connector and field.
var ErrInvalidImport = errors.New("job: invalid import")

// ImportFile is a jobs file in seed 000's earlier shape: connectors with
// pair, timeframe and type arrays, which become one job per pair x
// timeframe x type.
//
//	connectors:
//	  - id: binance
//	    policies: [binance-weight]
//	    profile: binance
//	    priority: 50
//	    pairs: [BTC/USDT, ETH/USDT]
//	    timeframes: [1m, 1h]
//	    types: [ohlcv]
type ImportFile struct {
	Connectors []ImportConnector `yaml:"connectors"`
}

// ImportConnector is one connector of an ImportFile.
type ImportConnector struct {
	ID string `yaml:"id"`
	// Status is active, paused or disabled; empty leaves a stored
	// connector's status alone (active for a new one).
	Status   string   `yaml:"status"`
	Policies []string `yaml:"policies"`
	Profile  string   `yaml:"profile"`
	// Priority and Group apply to every job of the connector.
	Priority int    `yaml:"priority"`
	Group    string `yaml:"group"`
	// Pairs, Timeframes and Types make the jobs: id
	// "<connector>:<pair>:<timeframe>:<type>", params {"symbol", "timeframe"},
	// run every timeframe unless Interval or Cron is set.
	Pairs      []string `yaml:"pairs"`
	Timeframes []string `yaml:"timeframes"`
	Types      []string `yaml:"types"`
	Interval   string   `yaml:"interval"`
	// Cron, instead of Interval, runs every job of the connector on a cron
	// schedule ("*/5 * * * *", "@hourly"; see store.ParseCron) read in
	// TimeZone (an IANA name; empty means UTC).
	Cron     string `yaml:"cron"`
	TimeZone string `yaml:"time_zone"`
}

// Import is a parsed jobs file: the connectors and jobs to upsert.
type Import struct {
	Connectors []store.Connector
	Jobs       []store.JobSpec
}

// ImportResult counts what an import did.
type ImportResult struct {
	ConnectorsCreated, ConnectorsUpdated, ConnectorsUnchanged int
	JobsCreated, JobsUpdated, JobsUnchanged                   int
}

// ParseImport parses and validates a jobs file. Nothing is written: a bad
// file is refused whole, with every error named.
func ParseImport(data []byte) (*Import, error) {
	var f ImportFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidImport, err)
	}
	out := &Import{}
	var errs []error
	seenC := map[string]bool{}
	seenJ := map[string]bool{}
	for i, c := range f.Connectors {
		at := fmt.Sprintf("connectors[%d]", i)
		if c.ID != "" {
			at = fmt.Sprintf("connector %q", c.ID)
		}
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalidImport, at, fmt.Sprintf(format, args...)))
		}
		conn := store.Connector{ID: c.ID, Status: store.ConnectorStatus(c.Status), Policies: c.Policies, Profile: c.Profile}
		if err := conn.Check(); err != nil {
			bad("%v", err)
			continue
		}
		if seenC[c.ID] {
			bad("listed twice")
			continue
		}
		seenC[c.ID] = true
		out.Connectors = append(out.Connectors, conn)
		if len(c.Pairs) == 0 && len(c.Timeframes) == 0 && len(c.Types) == 0 {
			continue
		}
		if len(c.Pairs) == 0 || len(c.Timeframes) == 0 || len(c.Types) == 0 {
			bad("pairs, timeframes and types must all be set to make jobs")
			continue
		}
		var fixed time.Duration
		if c.Cron != "" && c.Interval != "" {
			bad("give interval or cron, not both")
			continue
		}
		if c.TimeZone != "" && c.Cron == "" {
			bad("time_zone %q needs cron", c.TimeZone)
			continue
		}
		if c.Cron != "" {
			if _, err := store.ParseCron(c.Cron, c.TimeZone); err != nil {
				bad("%v", err)
				continue
			}
		}
		if c.Interval != "" {
			d, err := ParseTimeframe(c.Interval)
			if err != nil {
				bad("interval: %v", err)
				continue
			}
			fixed = d
		}
		for _, tf := range c.Timeframes {
			iv := fixed
			if iv == 0 && c.Cron == "" {
				d, err := ParseTimeframe(tf)
				if err != nil {
					bad("timeframe %q: %v (set interval to run it on another schedule)", tf, err)
					continue
				}
				iv = d
			}
			for _, pair := range c.Pairs {
				for _, typ := range c.Types {
					params, _ := json.Marshal(struct {
						Symbol    string `json:"symbol"`
						Timeframe string `json:"timeframe"`
					}{pair, tf})
					spec := store.JobSpec{ID: c.ID + ":" + pair + ":" + tf + ":" + typ, ConnectorID: c.ID, Type: typ,
						Params: params, Priority: c.Priority, Interval: iv, GroupKey: c.Group,
						Cron: c.Cron, TimeZone: c.TimeZone}
					if err := spec.Check(); err != nil {
						bad("%v", err)
						continue
					}
					if seenJ[spec.ID] {
						bad("job %q listed twice", spec.ID)
						continue
					}
					seenJ[spec.ID] = true
					out.Jobs = append(out.Jobs, spec)
				}
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// ParseTimeframe parses an exchange timeframe such as 1s, 1m, 15m, 1h, 1d
// or 1w into its length. Months (1M) have no fixed length and are refused.
func ParseTimeframe(s string) (time.Duration, error) {
	if len(s) < 2 {
		return 0, fmt.Errorf("%q is not a timeframe such as 1m, 1h or 1d", s)
	}
	n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
	if err != nil || n < 1 || n > 100000 {
		return 0, fmt.Errorf("%q is not a timeframe such as 1m, 1h or 1d", s)
	}
	var unit time.Duration
	switch s[len(s)-1] {
	case 's':
		unit = time.Second
	case 'm':
		unit = time.Minute
	case 'h':
		unit = time.Hour
	case 'd':
		unit = 24 * time.Hour
	case 'w':
		unit = 7 * 24 * time.Hour
	case 'M':
		return 0, fmt.Errorf("%q is in months, which have no fixed length", s)
	default:
		return 0, fmt.Errorf("%q has an unknown unit (s, m, h, d or w)", s)
	}
	d := time.Duration(n) * unit
	if d > store.MaxJobInterval {
		return 0, fmt.Errorf("%q is longer than %s", s, store.MaxJobInterval)
	}
	return d, nil
}

// Apply upserts the import's connectors, then its jobs. A record already
// stored as the import says is left untouched, so applying the same import
// again changes nothing (ImportResult says so). A job's state (cursors,
// stats, next run) is never changed by an import.
func (im *Import) Apply(ctx context.Context, st store.JobStore) (ImportResult, error) {
	var res ImportResult
	for _, c := range im.Connectors {
		cur, err := st.GetConnector(ctx, c.ID)
		switch {
		case errors.Is(err, store.ErrConnectorNotFound):
		case err != nil:
			return res, err
		case (c.Status == "" || c.Status == cur.Status) && slices.Equal(nonNil(c.Policies), cur.Policies) && c.Profile == cur.Profile:
			res.ConnectorsUnchanged++
			continue
		}
		_, created, err := st.UpsertConnector(ctx, c)
		if err != nil {
			return res, err
		}
		if created {
			res.ConnectorsCreated++
		} else {
			res.ConnectorsUpdated++
		}
	}
	for _, s := range im.Jobs {
		cur, err := st.GetJob(ctx, s.ID)
		switch {
		case errors.Is(err, store.ErrJobNotFound):
		case err != nil:
			return res, err
		case sameSpec(&s, &cur.JobSpec):
			res.JobsUnchanged++
			continue
		}
		_, created, err := st.UpsertJob(ctx, s, time.Time{})
		if err != nil {
			return res, err
		}
		if created {
			res.JobsCreated++
		} else {
			res.JobsUpdated++
		}
	}
	return res, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func sameSpec(a, b *store.JobSpec) bool {
	return a.ID == b.ID && a.ConnectorID == b.ConnectorID && a.Type == b.Type && a.NormalParams() == b.NormalParams() &&
		a.Disabled == b.Disabled && a.Priority == b.Priority && a.Interval == b.Interval && a.Group() == b.Group() &&
		a.Cron == b.Cron && a.TimeZone == b.TimeZone
}
