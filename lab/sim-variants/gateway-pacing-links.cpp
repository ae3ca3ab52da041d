// EXPERIMENTS.md Q22: eight links the suite does not have, shipped (rsfc both knobs) against the
// simulator's gateway pacer of gateway-pacing.patch (paced: fed at arrival; rel: the regulator
// fed at release). With the patch applied in a scratch worktree and its build dir `build`:
//   g++ -std=c++20 -O2 -Iinclude -Itest lab/sim-variants/gateway-pacing-links.cpp \
//     build/librsfc_regulators.a build/librsfc_core.a build/librsfc_packet.a -o /tmp/links
//   AS=1 /tmp/links 1.05 60     # gain, samples in the windowed max; AS=1: after startup only
// Prints per link the medians of three seeds: download and upload as % of link capacity, p95.
#include "regulator_sim.h"
using namespace rsfc; using namespace rsfc::sim;
struct L{const char*n; double up,down; uint64_t ub,db; Nanos p1,p2; int ups,downs;};
int main(int argc,char**argv){
  double gain = argc>1? atof(argv[1]):1.05; int samples = argc>2? atoi(argv[2]):60;
  L links[]={{"3g",2e6,7.2e6,1000000,256000,20*kMilli,10*kMilli,1,1},
    {"lte",10e6,30e6,2000000,1000000,20*kMilli,10*kMilli,1,1},
    {"slow-up",0.5e6,10e6,500000,500000,30*kMilli,10*kMilli,1,1},
    {"fast-up",8e6,12e6,2000000,500000,20*kMilli,10*kMilli,1,1},
    {"long",2e6,7.2e6,1000000,512000,60*kMilli,40*kMilli,1,1},
    {"2dl",2e6,7.2e6,1000000,256000,20*kMilli,10*kMilli,1,2},
    {"2ul",2e6,7.2e6,1000000,256000,20*kMilli,10*kMilli,2,1},
    {"fat",5e6,50e6,2000000,2000000,15*kMilli,5*kMilli,1,1}};
  for (auto& l: links){
    for (int pace=0; pace<3; ++pace){
      std::vector<double> dl,ul,p95,al,alp;
      for(uint32_t seed=0;seed<3;++seed){
        auto mk=[&](int u,int d){ Scenario s; s.up_bps=l.up; s.down_bps=l.down; s.up_buffer=l.ub; s.down_buffer=l.db; s.p1=l.p1;s.p2=l.p2;
          s.duration=38*kSecond; s.warmup=8*kSecond; s.seed=seed; s.uploads=u; s.downloads=d;
          s.uplink=Policy::kRsfc; s.downlink=Policy::kRsfc; s.downlink_queue_regulator=true;
          if(pace){s.pace_data=true;s.pace_phone_clock=true;s.pace_gain=gain;s.pace_samples=samples;s.pace_release_clock=pace>1; s.pace_after_startup=getenv("AS")!=nullptr;}
          return simulate(s);};
        Result b=mk(l.ups,l.downs), a=mk(0,l.downs);
        dl.push_back(100*b.download_bps/l.down); ul.push_back(100*b.upload_bps/l.up); p95.push_back(b.ping_p95_ms);
        al.push_back(100*a.download_bps/l.down); alp.push_back(a.ping_p95_ms);
      }
      auto med=[](std::vector<double> v){std::sort(v.begin(),v.end());return v[v.size()/2];};
      printf("%-8s %-6s dl %5.1f ul %5.1f p95 %5.0f | alone %5.1f p95 %5.0f  (base %ld ms)\n", l.n, pace==2?"rel":pace?"paced":"ship", med(dl),med(ul),med(p95),med(al),med(alp), (long)(2*(l.p1+l.p2)/kMilli));
    }
  }
}
