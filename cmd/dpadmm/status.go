package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

const statusHelp = `Usage: dpadmm status --http ADDR [--json]

Prints the state of a running node from its HTTP endpoint (the node's --http address):
its run state and readiness (/readyz), and its public status (/status): run, members and
connected peers, own updates, the epsilon spent (local, and the planned network figure
with whether its conditions hold), the budget left, and while it waits for its run, what
it waits for. The public status is a snapshot refreshed once per status period, so that
polling it does not reveal the token's path. --json prints both documents as one JSON
object. Exit code 0 when the node is ready (running or done), 1 when it is not or cannot
be reached.
  dpadmm status --http 127.0.0.1:9090
`

func runStatus(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", statusHelp, stdout)
	addr := fs.String("http", "", "the node's --http address (host:port, or a URL)")
	asJSON := fs.Bool("json", false, "print the status and readiness as JSON")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the node to answer")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return usagef("status", "unexpected argument %q", fs.Arg(0))
	case *addr == "":
		return usagef("status", "--http is required (the node's --http address)")
	case *timeout <= 0:
		return usagef("status", "--timeout must be > 0, got %v", *timeout)
	}
	base := strings.TrimSuffix(*addr, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	if u, err := url.Parse(base); err != nil || u.Host == "" {
		return usagef("status", "--http %q is not a host:port or a URL", *addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	get := func(path string) (int, map[string]any, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return 0, nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&m); err != nil {
			return resp.StatusCode, nil, fmt.Errorf("%s%s: not a node's JSON: %v", base, path, err)
		}
		return resp.StatusCode, m, nil
	}
	code, ready, err := get("/readyz")
	if err != nil {
		return fmt.Errorf("cannot reach the node at %s: %v", base, err)
	}
	_, st, err := get("/status")
	if err != nil {
		return fmt.Errorf("cannot read the node's status at %s: %v", base, err)
	}
	if *asJSON {
		if err := writeJSON(stdout, map[string]any{"ready": ready, "status": st}); err != nil {
			return err
		}
	} else {
		printNodeStatus(stdout, ready, st)
	}
	if code != http.StatusOK {
		return fmt.Errorf("the node is not ready: %v", ready["reason"])
	}
	return nil
}

// printNodeStatus prints the readiness and public status documents of a node.
func printNodeStatus(w io.Writer, ready, st map[string]any) {
	str := func(m map[string]any, k string) string {
		switch v := m[k].(type) {
		case nil:
			return "-"
		case float64:
			return fmt.Sprintf("%.4g", v)
		default:
			return fmt.Sprint(v)
		}
	}
	fmt.Fprintf(w, "run %s: %s", str(st, "run"), str(ready, "state"))
	if r := str(ready, "reason"); r != "-" && r != "" {
		fmt.Fprintf(w, " (%s)", r)
	}
	member := fmt.Sprintf("member %s of %s", str(st, "index"), str(st, "members"))
	if i, ok := st["index"].(float64); ok && i < 0 {
		member = "not a member yet" // joining: the membership is not fixed
	}
	fmt.Fprintf(w, "\n  peer %s, %s, %s peers connected\n", str(st, "peer"), member, str(st, "peers"))
	if g, ok := st["gossip"].(map[string]any); ok {
		// Neighbour exchange: iterations, not walk updates.
		fmt.Fprintf(w, "  %s iteration %s of %s, epsilon spent %s: %s\n", str(g, "algo"), str(g, "iter"), str(g, "iters"),
			str(g, "epsilon_spent"), str(g, "epsilon_theorem"))
	} else {
		fmt.Fprintf(w, "  own updates %s (updates left %s), epsilon spent %s: %s\n", str(st, "own_updates"), str(st, "updates_left"),
			str(st, "epsilon_spent"), str(st, "epsilon_theorem"))
	}
	if nb, ok := st["network_planned"].(map[string]any); ok {
		hold := "conditions hold"
		if nb["conditions_hold"] != true {
			hold = "conditions do NOT hold: the local figure is the guarantee"
		}
		fmt.Fprintf(w, "  planned network epsilon %s (%s)\n", str(nb, "epsilon"), hold)
	}
	if b, ok := st["budget_epsilon"].(float64); ok && b > 0 {
		fmt.Fprintf(w, "  budget %s, left %s\n", str(st, "budget_epsilon"), str(st, "budget_left"))
	}
	if j, ok := st["join"].(map[string]any); ok {
		if want, ok := j["want"].(float64); ok && want > 0 {
			fmt.Fprintf(w, "  joining as %s: %s of %s members\n", str(j, "role"), str(j, "joined"), str(j, "want"))
		} else {
			fmt.Fprintf(w, "  joining as %s: waiting for the starter to fix the membership\n", str(j, "role"))
		}
		for _, k := range []string{"waiting_for", "refused"} {
			if l, ok := j[k].([]any); ok && len(l) > 0 {
				fmt.Fprintf(w, "  %s: %v\n", strings.ReplaceAll(k, "_", " "), l)
			}
		}
	}
	fmt.Fprintf(w, "  status snapshot %s s old (refreshed every %s s)\n", str(st, "snapshot_age_seconds"), str(st, "status_period_seconds"))
}
