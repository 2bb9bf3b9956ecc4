import socket, sys, select
# Usage: python3 sim.py PORT N CYCLES  (a throwaway redis-server on loopback; it DELs keys L, {L}:*)
# Simulates N waiting processes in one loop, each with its own subscribed connection; prints the
# server's commands per acquisition (INFO commandstats, inner calls included) and the shares.
import os
HERE=os.path.dirname(os.path.abspath(__file__))
P=int(sys.argv.pop(1))
def src(name): return open(os.path.join(HERE,'common.lua')).read()+open(os.path.join(HERE,name)).read()
def enc(*a):
    out=b'*%d\r\n'%len(a)
    for x in a:
        x=x if isinstance(x,bytes) else str(x).encode(); out+=b'$%d\r\n%s\r\n'%(len(x),x)
    return out
class Conn:
    def __init__(s): s.s=socket.create_connection(('127.0.0.1',P)); s.f=s.s.makefile('rb')
    def read(s):
        l=s.f.readline(); t=l[:1]; v=l[1:-2]
        if t in b'+-': return v
        if t==b':': return int(v)
        if t==b'$':
            n=int(v); 
            if n<0: return None
            d=s.f.read(n+2); return d[:-2]
        if t==b'*': return [s.read() for _ in range(int(v))]
    def cmd(s,*a): s.s.sendall(enc(*a)); return s.read()
N=int(sys.argv[1]); CYC=int(sys.argv[2]); claim=1000
KILL=int(sys.argv[3]) if len(sys.argv)>3 else 0  # waiters whose process 'dies' (subscription closed) mid-run
K=['L','{L}:q','{L}:qi','{L}:fence']
c=Conn(); c.cmd('DEL',*K)
SA=c.cmd('SCRIPT','LOAD',src('acquire.lua')).decode(); SR=c.cmd('SCRIPT','LOAD',src('release.lua')).decode()
subs=[]; tok={}
for i in range(N):
    s=Conn(); s.cmd('SUBSCRIBE','{L}:w:%d'%i); s.s.setblocking(True); subs.append(s)
n=[0]*N; gen=[0]*N
def token(i): return 'p%d-%d'%(i,gen[i])
def acq(i,join):
    return c.cmd('EVALSHA',SA,4,*K,token(i),30000,join,1,'{L}:w:%d'%i,claim)
def rel(i): return c.cmd('EVALSHA',SR,4,*K,token(i),claim,'{L}:released')
# process 0 takes it; others queue (first attempt, then join as they are subscribed)
holder=0; assert acq(0,0)[0]==1
for i in range(1,N): r=acq(i,1); assert r[0]==0
c.cmd('CONFIG','RESETSTAT'); c.cmd('CONFIG','RESETSTAT')
dead=set()
for k in range(CYC):
    if k==CYC//2 and KILL:
        for i in range(N):
            if len(dead)<KILL and i!=holder: subs[i].s.close(); dead.add(i)
        subs=[x if i not in dead else None for i,x in enumerate(subs)]
    r=rel(holder); old=holder; gen[old]+=1
    # find the grant: read from whichever subscription got 'g:'
    grantee=None
    while grantee is None:
        rd,_,_=select.select([x.s for x in subs if x],[],[],1)
        if not rd: break
        for i,x in enumerate(subs):
            if x and x.s in rd:
                if b'g:' in x.s.recv(65536): grantee=i
    assert grantee is not None, r
    cl=c.cmd('EVAL',"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0",1,'L',token(grantee),30000); assert cl==1, cl
    n[grantee]+=1
    # the old holder comes back and queues (it is still subscribed)
    if old not in dead: r=acq(old,1); assert r[0]==0, r
    holder=grantee
st=c.cmd('INFO','commandstats').decode()
tot=0; parts=[]
for line in st.splitlines():
    if line.startswith('cmdstat_'):
        name=line.split(':')[0][8:]; calls=int(line.split('calls=')[1].split(',')[0])
        if name in ('config','info'): continue
        tot+=calls; parts.append('%s=%.2f'%(name,calls/CYC))
live=[n[i] for i in range(N) if i not in dead]
print('N=%d killed=%d cmds/acq=%.2f min/max(live)=%d/%d'%(N,len(dead),tot/CYC,min(live),max(live)),' '.join(parts))
