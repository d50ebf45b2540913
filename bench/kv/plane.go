package main

import (
	"fmt"
	"time"

	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/kvstore/transport"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// plane is the shard servers and the remote worker's client of one
// transport, on subjects of their own so planes do not meet.
type plane struct {
	servers     []*kvstore.Server
	serverConns []*nats.Conn
	serverTrs   []transport.Transport
	tcps        []*transport.TCP
	client      *kvstore.Client // hosts no shard
	clientConn  *nats.Conn
}

// hosts are the shard servers (-shards).
var hosts = []string{"s0", "s1"}

// tableSpecs are the benchmark's tables: "l-*" live on one shard hosted by
// s0 (the local worker's slave); "r-*" are spread over s0 and s1 (the
// remote worker hosts neither).
func tableSpecs(widths []int) (local, remote []kvstore.TableSpec, placements []kvstore.Placement) {
	for _, w := range widths {
		size := uint64(max(1<<22/w, 1<<12)) // about 4M values per table
		local = append(local, kvstore.TableSpec{Name: fmt.Sprintf("l-dense-%d", w), Size: size, Width: w, DType: kvstore.Float32})
		remote = append(remote, kvstore.TableSpec{Name: fmt.Sprintf("r-dense-%d", w), Size: size, Width: w, DType: kvstore.Float32})
	}
	sparse := kvstore.TableSpec{Size: 1 << 40, Width: 1, DType: kvstore.Float32, Storage: kvstore.Sparse, Partition: kvstore.HashPartition}
	ls, rs := sparse, sparse
	ls.Name, rs.Name = "l-sparse-1", "r-sparse-1"
	local, remote = append(local, ls), append(remote, rs)
	for _, s := range local {
		placements = append(placements, kvstore.Placement{Spec: s.WithDefaults(), Hosts: hosts[:1]})
	}
	for _, s := range remote {
		placements = append(placements, kvstore.Placement{Spec: s.WithDefaults(), Hosts: hosts})
	}
	return local, remote, placements
}

func kvSubject(tr string) func(string) string {
	return func(slave string) string { return "bench." + tr + ".slave." + slave + ".kv" }
}

func helloSubject(tr string) func(string) string {
	return func(slave string) string { return "bench." + tr + ".slave." + slave + ".dp" }
}

// endpoint is a transport tr named name on nc: nats, tcp (the direct data
// plane) or tls (the direct data plane encrypted, as next to a TLS bus).
func endpoint(tr, name string, nc *nats.Conn) (transport.Transport, *transport.TCP, error) {
	nt := transport.NewNATS(nc, kvSubject(tr))
	if tr == "nats" {
		return nt, nil, nil
	}
	t, err := transport.NewTCP(nt, transport.TCPConfig{Self: name, Hello: helloSubject(tr), TLS: tr == "tls"})
	return t, t, err
}

// startPlane starts the worker's client of transport tr, and the shard
// servers too when withServers (else shard processes serve).
func startPlane(tr string, connect func(string) (*nats.Conn, error), hosts []string, placements []kvstore.Placement, window int, withServers bool) (p *plane, err error) {
	p = &plane{}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	open := func(name string) (transport.Transport, *nats.Conn, error) {
		nc, err := connect(tr + "-" + name)
		if err != nil {
			return nil, nil, err
		}
		t, tcp, err := endpoint(tr, name, nc)
		if tcp != nil {
			p.tcps = append(p.tcps, tcp)
		}
		return t, nc, err
	}
	for _, h := range hosts {
		if !withServers {
			break
		}
		t, nc, err := open(h)
		if err != nil {
			return p, err
		}
		s, err := kvstore.NewServer(t, h, zerolog.Nop())
		if err != nil {
			return p, err
		}
		p.servers = append(p.servers, s)
		if err := s.CreateTables("bench", h, placements); err != nil {
			return p, err
		}
		p.serverConns, p.serverTrs = append(p.serverConns, nc), append(p.serverTrs, t)
	}
	t, nc, err := open("worker")
	if err != nil {
		return p, err
	}
	p.clientConn = nc
	p.client, err = kvstore.NewClient(kvstore.ClientConfig{Transport: t, Task: "bench", Hosts: hosts,
		Consistency: kvstore.Consistency{Kind: kvstore.ASP}, Timeout: 30 * time.Second, Window: window})
	return p, err
}

func (p *plane) close() {
	if p.client != nil {
		p.client.Close()
	}
	for _, s := range p.servers {
		s.Close()
	}
	for _, t := range p.tcps {
		t.Close()
	}
}

// remoteRows measures one remote row over every transport of o and raw
// NATS, interleaved, and reports a row per transport: nats against raw
// NATS (with the project's target), tcp against nats.
func remoteRows(rep *reporter, o options, op string, spec kvstore.TableSpec, batch int, calls [][]msg, raw loop, target float64, over func(i int) loop) {
	var loops []loop
	for i := range o.transports {
		loops = append(loops, over(i))
	}
	r := rates(o, append(loops, raw)...)
	natsRate := 0.0
	for i, tr := range o.transports {
		if tr == "nats" {
			natsRate = r[i]
		}
	}
	for i, tr := range o.transports {
		x := withRaw(kvRow(op, spec, batch, r[i]), r[len(r)-1], calls)
		x.Transport = tr
		switch {
		case tr == "nats":
			x = x.withTarget(target)
		case natsRate > 0:
			x.Baseline, x.Ratio = "of kvstore over nats", r[i]/natsRate
		}
		rep.add(x)
	}
}
