package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/kvstore"
	"github.com/rs/zerolog"
)

// spawnShards starts one process per shard host serving transport tr's
// shards (and, for nats, the raw baseline's responders), each connected
// to the bus at url, and returns once all are ready.
func spawnShards(tr, url string, o options) (stop func(), err error) {
	var procs []*exec.Cmd
	var stdins []io.Closer
	stop = func() {
		for _, in := range stdins {
			in.Close() // a shard process exits when its stdin closes
		}
		for _, p := range procs {
			p.Wait()
		}
	}
	widths := make([]string, len(o.widths))
	for i, w := range o.widths {
		widths[i] = fmt.Sprint(w)
	}
	for _, h := range hosts {
		args := []string{"-serve", tr + ":" + h, "-nats", url, "-widths", strings.Join(widths, ","), "-shards", fmt.Sprint(len(hosts))}
		if o.cpuprofile != "" {
			args = append(args, "-cpuprofile", o.cpuprofile+"."+tr+"-"+h)
		}
		cmd := exec.Command(os.Args[0], args...)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			stop()
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			stop()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			stop()
			return nil, fmt.Errorf("shard process %s:%s: %w", tr, h, err)
		}
		procs, stdins = append(procs, cmd), append(stdins, in)
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || strings.TrimSpace(line) != "ready" {
			stop()
			return nil, fmt.Errorf("shard process %s:%s did not start: %q %v", tr, h, line, err)
		}
	}
	return stop, nil
}

// serveShard is a shard process of a -procs run: it serves its host's
// shards over transport tr until its stdin closes.
func serveShard(what, url string, widths []int) error {
	tr, host, ok := strings.Cut(what, ":")
	if !ok || (tr != "nats" && tr != "tcp" && tr != "tls") {
		return fmt.Errorf("-serve %q: want nats:HOST, tcp:HOST or tls:HOST", what)
	}
	nc, err := bus.Connect(bus.Options{URL: url, Name: "shard-" + what})
	if err != nil {
		return err
	}
	defer nc.Close()
	t, tcp, err := endpoint(tr, host, nc)
	if err != nil {
		return err
	}
	if tcp != nil {
		defer tcp.Close()
	}
	s, err := kvstore.NewServer(t, host, zerolog.Nop())
	if err != nil {
		return err
	}
	defer s.Close()
	_, _, placements := tableSpecs(widths)
	if err := s.CreateTables("bench", host, placements); err != nil {
		return err
	}
	if tr == "nats" {
		for i, h := range hosts {
			if h == host {
				if _, err := rawResponder(nc, i); err != nil {
					return err
				}
			}
		}
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	return nil
}
