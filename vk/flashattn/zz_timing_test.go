package flashattn
import ("testing";"time";"os";"strconv";"github.com/vkinfer/vkinfer/attention")
func TestZZRun(t *testing.T){
 d:=setup(t)
 bc,_:=strconv.Atoi(os.Getenv("BC"))
 for _, c := range []tc{{br: 16, wave: 32, dim: 96, gqa: 4, kv: 255, queries: 1},{br: 1, wave: 32, dim: 128, gqa: 4, kv: 255, queries: 1}} {
  fa,_:=New(d, Options{Wave: c.wave, Prefs: attention.Prefs{Br: c.br, Bc: bc, Splits: 1}})
  sh:=Shape{Queries:c.queries, Heads: c.gqa*2, KVHeads:2, HeadDim:c.dim, Context:c.kv, Scale:1}
  p,_:=fa.Plan(sh)
  b:=buffer(t,d,make([]byte,1<<20))
  io:=IO{Q:whole(b),K:whole(b),V:whole(b),Out:whole(buffer(t,d,make([]byte,1<<16))),Step:whole(buffer(t,d,make([]byte,16)))}
  for i:=0;i<2;i++{
  s:=d.NewSequence(); fa.Record(s,io,sh); s.End()
  t0:=time.Now(); s.Run(); t.Logf("%v run %v", p, time.Since(t0)); s.Free()}
  fa.Close()
 }
}
