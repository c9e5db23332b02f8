package bus

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/postroom/postroom/transport/gochannel"
)

// BenchmarkStopBookkeeping is what a graceful stop costs each delivery
// (the held-delivery count and the context that outlives the stop), to
// set beside the 140 µs or so a delivery with the inbox costs on
// PostgreSQL (docs/benchmarks.md):
//
//	go test -run '^$' -bench StopBookkeeping -benchmem ./bus/
func BenchmarkStopBookkeeping(b *testing.B) {
	bs, err := New(Config{Endpoint: "bench", Transport: gochannel.New(gochannel.Config{})})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background()) // a transport's delivery context
	defer cancel()
	msg := message.NewMessage("m", nil)
	b.ReportAllocs()
	for b.Loop() {
		msg.SetContext(ctx)
		bs.drain.Add()
		done := bs.outliveStop(msg)
		done()
		bs.drain.Done()
	}
}
