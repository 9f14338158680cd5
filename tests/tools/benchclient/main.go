// benchclient calls RunFunction as Crossplane's requirements loop does, from Go as Crossplane
// does, so that `make bench` times the function over gRPC without a Python client's own cost.
//
// It reads, on stdin, the cases tests/tools/bench.py prepared: each reconcile's first request
// and, for every requirements answer the function gives, the request Crossplane would send next
// (already built: fetching and building them is Crossplane's work, not timed). Crossplane
// marshals each request afresh, without the deterministic option, so every map (a Struct's
// fields, the observed resources) comes in a new order each call; here each request is
// marshalled so, several times ahead of the timing, and the calls take turns between them.
// It prints, per case, the calls of a reconcile, its median and p90 over gRPC, and reconciles
// per second with concurrent callers sharing one connection.
//
// With -fleet FILE it reconciles the clusters of a fleet (FILE, written by bench.py: each
// cluster's first request and its next requests by requirements) round robin, one at a time,
// each request marshalled afresh (a new map order) and its garbage collected before its
// reconcile is timed, and prints the median and p90 of the timed rounds (the first round fills
// the function's caches); then the same rounds against the echo (job "echo"), the transport of
// the same requests, whose median it prints beside them.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

const (
	method = "/apiextensions.fn.proto.v1.FunctionRunnerService/RunFunction"
	// RunFunctionResponse.requirements.
	requirementsField = 5
	// Crossplane's MaxRequirementsIterations, plus its first call.
	maxCalls = 6
	// Sequential reconciles are timed in this many turns per case.
	rounds = 5
	// Each request is sent in this many map orders, in turn.
	orders  = 8
	request = "apiextensions.fn.proto.v1.RunFunctionRequest"
)

type Step struct {
	Requirements []byte `json:"requirements"`
	Request      []byte `json:"request"`
}

type Case struct {
	Name  string `json:"name"`
	First []byte `json:"first"`
	Next  []Step `json:"next"`
	first *variants
	next  map[string]*variants
}

// variants is one request marshalled in several map orders, sent in turn.
type variants struct {
	data [][]byte
	turn atomic.Uint64
}

func (v *variants) take() []byte {
	return v.data[v.turn.Add(1)%uint64(len(v.data))]
}

// reorder marshals data (a RunFunctionRequest) as Crossplane does, again and again: Go ranges
// over each map in a random order, so (nearly) every variant orders its maps differently.
func reorder(typ protoreflect.MessageType, data []byte, n int) (*variants, error) {
	msg := typ.New().Interface()
	if err := proto.Unmarshal(data, msg); err != nil {
		return nil, err
	}
	v := &variants{}
	for i := 0; i < n; i++ {
		out, err := proto.Marshal(msg)
		if err != nil {
			return nil, err
		}
		v.data = append(v.data, out)
	}
	return v, nil
}

// requestType is RunFunctionRequest from the descriptors bench.py sends (a FileDescriptorSet).
func requestType(data []byte) (protoreflect.MessageType, error) {
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(data, &set); err != nil {
		return nil, err
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		return nil, err
	}
	d, err := files.FindDescriptorByName(request)
	if err != nil {
		return nil, err
	}
	return dynamicpb.NewMessageType(d.(protoreflect.MessageDescriptor)), nil
}

type Input struct {
	Descriptors []byte  `json:"descriptors"`
	Target      string  `json:"target"`
	Echo        string  `json:"echo"` // a server answering without the function: the floor, timed in turn
	Reconciles  int     `json:"reconciles"`
	Concurrency int     `json:"concurrency"`
	Seconds     float64 `json:"seconds"`
	Cases       []*Case `json:"cases"`
}

type Result struct {
	Name       string  `json:"name"`
	Calls      int     `json:"calls"`
	MedianMs   float64 `json:"median_ms"`
	P90Ms      float64 `json:"p90_ms"`
	EchoMs     float64 `json:"echo_median_ms"`
	PerSecond  float64 `json:"per_second"`
	Concurrent int     `json:"concurrency"`
}

// bytesCodec passes messages through as they are.
type bytesCodec struct{}

func (bytesCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }

// Unmarshal reuses the caller's buffer: the client allocates nothing per call, so its garbage
// collector does not compete with the server for the core.
func (bytesCodec) Unmarshal(data []byte, v any) error {
	out := v.(*[]byte)
	*out = append((*out)[:0], data...)
	return nil
}
func (bytesCodec) Name() string { return "proto" }

// requirements returns the requirements field of a serialised response, and whether it is set.
func requirements(rsp []byte) ([]byte, bool, error) {
	var out []byte
	found := false
	for len(rsp) > 0 {
		num, typ, n := protowire.ConsumeTag(rsp)
		if n < 0 {
			return nil, false, protowire.ParseError(n)
		}
		rsp = rsp[n:]
		if num == requirementsField && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(rsp)
			if m < 0 {
				return nil, false, protowire.ParseError(m)
			}
			out, found = append(out, v...), true
			rsp = rsp[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, rsp)
		if m < 0 {
			return nil, false, protowire.ParseError(m)
		}
		rsp = rsp[m:]
	}
	return out, found, nil
}

// reconcile calls until the function returns the requirements it returned before (none, on
// the first call, counts as before), as Crossplane's FetchingFunctionRunner does.
func reconcile(ctx context.Context, conn *grpc.ClientConn, c *Case, rsp *[]byte) (int, error) {
	req := c.first.take()
	var previous []byte
	hadPrevious := false
	for calls := 1; calls <= maxCalls; calls++ {
		if err := conn.Invoke(ctx, method, &req, rsp); err != nil {
			return calls, err
		}
		reqs, set, err := requirements(*rsp)
		if err != nil {
			return calls, err
		}
		if set == hadPrevious && bytes.Equal(reqs, previous) {
			return calls, nil
		}
		previous, hadPrevious = append(previous[:0], reqs...), set
		next, ok := c.next[string(reqs)]
		if !ok {
			return calls, fmt.Errorf("%s: the function asked for requirements the bench did not prepare", c.Name)
		}
		req = next.take()
	}
	return maxCalls, errors.New("requirements did not stabilise")
}

// timed runs n reconciles of c one after another, appending each one's milliseconds to samples.
func timed(conn *grpc.ClientConn, c *Case, n int, rsp *[]byte, samples []float64) ([]float64, error) {
	for i := 0; i < n; i++ {
		start := time.Now()
		if _, err := reconcile(context.Background(), conn, c, rsp); err != nil {
			return nil, err
		}
		samples = append(samples, float64(time.Since(start).Nanoseconds())/1e6)
	}
	return samples, nil
}

func throughput(conn *grpc.ClientConn, in *Input, c *Case) (float64, error) {
	var done atomic.Int64
	var failed atomic.Value
	deadline := time.Now().Add(time.Duration(in.Seconds * float64(time.Second)))
	var wg sync.WaitGroup
	for i := 0; i < in.Concurrency; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var rsp []byte
			for time.Now().Before(deadline) {
				if _, err := reconcile(context.Background(), conn, c, &rsp); err != nil {
					failed.Store(err)
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		return 0, err
	}
	return float64(done.Load()) / in.Seconds, nil
}

func run() error {
	var in Input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		return fmt.Errorf("cannot read the cases: %w", err)
	}
	conn, err := dial(in.Target)
	if err != nil {
		return err
	}
	defer conn.Close()
	echo, err := dial(in.Echo)
	if err != nil {
		return err
	}
	defer echo.Close()
	// Every case one reconcile at a time first, in rounds that take turns between the cases (a
	// slow spell of a shared machine then touches every case alike), then every case under load.
	results := make([]Result, len(in.Cases))
	samples := make([][]float64, len(in.Cases))
	floors := make([][]float64, len(in.Cases))
	var rsp []byte
	typ, err := requestType(in.Descriptors)
	if err != nil {
		return fmt.Errorf("cannot read the descriptors: %w", err)
	}
	for i, c := range in.Cases {
		if err := prepare(typ, c, orders); err != nil {
			return err
		}
		calls, err := reconcile(context.Background(), conn, c, &rsp)
		if err != nil {
			return err
		}
		for _, to := range []*grpc.ClientConn{conn, echo} { // warm up
			if _, err := timed(to, c, in.Reconciles/10, &rsp, nil); err != nil {
				return err
			}
		}
		results[i] = Result{Name: c.Name, Calls: calls, Concurrent: in.Concurrency}
	}
	runtime.GC()
	// The echo takes its turn right after the function, reconcile by reconcile, so both see the
	// same spells of the machine.
	for round := 0; round < rounds; round++ {
		for i, c := range in.Cases {
			for n := 0; n < max(in.Reconciles/rounds, 1); n++ {
				if samples[i], err = timed(conn, c, 1, &rsp, samples[i]); err != nil {
					return err
				}
				if floors[i], err = timed(echo, c, 1, &rsp, floors[i]); err != nil {
					return err
				}
			}
		}
	}
	for i := range results {
		results[i].MedianMs = quantile(samples[i], 0.5)
		results[i].P90Ms = quantile(samples[i], 0.9)
		results[i].EchoMs = quantile(floors[i], 0.5)
	}
	for i, c := range in.Cases {
		rate, err := throughput(conn, &in, c)
		if err != nil {
			return err
		}
		results[i].PerSecond = rate
	}
	return json.NewEncoder(os.Stdout).Encode(results)
}

func dial(target string) (*grpc.ClientConn, error) {
	return grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(bytesCodec{}), grpc.MaxCallRecvMsgSize(64<<20)),
	)
}

// quantile of samples, which it sorts.
func quantile(samples []float64, q float64) float64 {
	sort.Float64s(samples)
	return samples[int(float64(len(samples))*q)]
}

// FleetJob is what -fleet reads on stdin beside the file.
type FleetJob struct {
	Descriptors []byte `json:"descriptors"`
	Target      string `json:"target"`
	Echo        string `json:"echo"`   // a server answering without the function: the transport
	Rounds      int    `json:"rounds"` // timed, after one that is not
}

type FleetResult struct {
	Clusters int     `json:"clusters"`
	Calls    int     `json:"calls"`
	MedianMs float64 `json:"median_ms"`
	P90Ms    float64 `json:"p90_ms"`
	EchoMs   float64 `json:"echo_median_ms"`
}

// readChunk reads a length-prefixed (uint32, little endian) byte string.
func readChunk(r io.Reader) ([]byte, error) {
	var n uint32
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
		return nil, err
	}
	out := make([]byte, n)
	_, err := io.ReadFull(r, out)
	return out, err
}

// readFleet reads the clusters: a count, then per cluster its first request, the number of
// steps, and per step the requirements and the request that answers them.
func readFleet(path string) ([]*Case, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var count uint32
	if err := binary.Read(r, binary.LittleEndian, &count); err != nil {
		return nil, err
	}
	cases := make([]*Case, count)
	for i := range cases {
		c := &Case{Name: fmt.Sprintf("cluster-%d", i)}
		if c.First, err = readChunk(r); err != nil {
			return nil, err
		}
		var steps uint32
		if err := binary.Read(r, binary.LittleEndian, &steps); err != nil {
			return nil, err
		}
		for j := uint32(0); j < steps; j++ {
			var s Step
			if s.Requirements, err = readChunk(r); err != nil {
				return nil, err
			}
			if s.Request, err = readChunk(r); err != nil {
				return nil, err
			}
			c.Next = append(c.Next, s)
		}
		cases[i] = c
	}
	return cases, nil
}

// prepare marshals c's requests as Crossplane would send them, each in n map orders (a fleet's
// in one, made afresh before every reconcile, so its requests are held once).
func prepare(typ protoreflect.MessageType, c *Case, n int) error {
	var err error
	if c.first, err = reorder(typ, c.First, n); err != nil {
		return err
	}
	c.next = make(map[string]*variants, len(c.Next))
	for _, s := range c.Next {
		if c.next[string(s.Requirements)], err = reorder(typ, s.Request, n); err != nil {
			return err
		}
	}
	return nil
}

func runFleet(path string) error {
	var job FleetJob
	if err := json.NewDecoder(os.Stdin).Decode(&job); err != nil {
		return fmt.Errorf("cannot read the job: %w", err)
	}
	typ, err := requestType(job.Descriptors)
	if err != nil {
		return fmt.Errorf("cannot read the descriptors: %w", err)
	}
	cases, err := readFleet(path)
	if err != nil {
		return fmt.Errorf("cannot read the fleet: %w", err)
	}
	result := FleetResult{Clusters: len(cases)}
	samples, calls, err := fleetRounds(job.Target, typ, cases, job.Rounds, func(conn *grpc.ClientConn, c *Case, rsp *[]byte) (int, error) {
		return reconcile(context.Background(), conn, c, rsp)
	})
	if err != nil {
		return err
	}
	result.MedianMs, result.P90Ms = quantile(samples, 0.5), quantile(samples, 0.9)
	if job.Echo != "" {
		echoed, echoCalls, err := fleetRounds(job.Echo, typ, cases, job.Rounds, replay)
		if err != nil {
			return err
		}
		if echoCalls != calls {
			return fmt.Errorf("the echo took %d calls a reconcile, the function %d", echoCalls, calls)
		}
		result.EchoMs = quantile(echoed, 0.5)
	}
	result.Calls = calls
	return json.NewEncoder(os.Stdout).Encode(result)
}

// fleetRounds reconciles the fleet round robin against target, each cluster's requests marshalled
// afresh (a new map order) and their garbage collected before the timed call; the first round
// is not timed.
func fleetRounds(target string, typ protoreflect.MessageType, cases []*Case, rounds int, call func(*grpc.ClientConn, *Case, *[]byte) (int, error)) ([]float64, int, error) {
	conn, err := dial(target)
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close()
	var rsp []byte
	var samples []float64
	calls := 0
	for round := 0; round <= rounds; round++ {
		for _, c := range cases {
			if err := prepare(typ, c, 1); err != nil {
				return nil, 0, err
			}
			runtime.GC()
			start := time.Now()
			n, err := call(conn, c, &rsp)
			if err != nil {
				return nil, 0, err
			}
			calls = n
			if round > 0 {
				samples = append(samples, float64(time.Since(start).Nanoseconds())/1e6)
			}
			c.first, c.next = nil, nil
		}
	}
	return samples, calls, nil
}

// replay sends a cluster's requests in the order the function's reconcile sends them (the first,
// then each step's), without reading the answers: the echo answers any request of a size with
// one answer of that size, whose requirements may name another cluster of the fleet.
func replay(conn *grpc.ClientConn, c *Case, rsp *[]byte) (int, error) {
	req := c.first.take()
	if err := conn.Invoke(context.Background(), method, &req, rsp); err != nil {
		return 1, err
	}
	for i, s := range c.Next {
		req = c.next[string(s.Requirements)].take()
		if err := conn.Invoke(context.Background(), method, &req, rsp); err != nil {
			return i + 2, err
		}
	}
	return 1 + len(c.Next), nil
}

func main() {
	fleet := flag.String("fleet", "", "reconcile the fleet in this file round robin")
	flag.Parse()
	if *fleet != "" {
		if err := runFleet(*fleet); err != nil {
			fmt.Fprintln(os.Stderr, "benchclient:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchclient:", err)
		os.Exit(1)
	}
}
