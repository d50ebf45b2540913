package ownership

// Client is one worker's routing state: a bounded location cache and in-flight accounting.
// Rule 5: a learned location is applied only when no request is in flight, so a request on the
// new route can never overtake an earlier one still travelling the old route.
type Client struct {
	Home    func(uint64) NodeID
	cap     int
	cache   map[uint64]NodeID
	pending map[uint64]NodeID
	open    map[uint64]*pending
	Flushes int
}

// NewClient returns a client whose cache holds at most capacity keys.
func NewClient(home func(uint64) NodeID, capacity int) *Client {
	return &Client{Home: home, cap: capacity, cache: map[uint64]NodeID{}, pending: map[uint64]NodeID{}, open: map[uint64]*pending{}}
}

// Route is the node a request for k goes to now.
func (c *Client) Route(k uint64) NodeID {
	if n, ok := c.cache[k]; ok {
		return n
	}
	return c.Home(k)
}

// pending counts one request's answers. Replies may arrive in any order (a forwarded
// sub-request's reply can overtake its parent's), so the request completes when every position
// is answered and the reply count balances; a reply that arrives after completion carries no
// positions and is ignored.
type pending struct {
	positions int // not yet answered
	replies   int // sends + spawned - replies received (may dip below zero transiently)
}

// Sent records a request of n positions sent as sends messages.
func (c *Client) Sent(req uint64, n, sends int) { c.open[req] = &pending{positions: n, replies: sends} }

// InFlight is the number of requests not fully answered.
func (c *Client) InFlight() int { return len(c.open) }

// Reply accounts one reply (answered keys, forwarded sub-requests spawned, serving node) and
// reports whether request req is complete.
func (c *Client) Reply(req uint64, keys []uint64, spawned int, from NodeID) bool {
	p, ok := c.open[req]
	if !ok {
		return false
	}
	p.replies += spawned - 1
	p.positions -= len(keys)
	for _, k := range keys {
		if c.Route(k) != from {
			c.pending[k] = from
		}
	}
	done := p.positions == 0 && p.replies <= 0
	if done {
		delete(c.open, req)
	}
	if len(c.open) == 0 && len(c.pending) > 0 {
		c.Flushes++
		for k, n := range c.pending {
			if _, ok := c.cache[k]; !ok && len(c.cache) >= c.cap {
				for old := range c.cache { // evict any entry: falling back to the home is always safe
					delete(c.cache, old)
					break
				}
			}
			c.cache[k] = n
		}
		clear(c.pending)
	}
	return done
}
