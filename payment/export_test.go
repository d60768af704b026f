package payment

// Waiting is how many asks wait for the door's next batch.
func (d *Desk) Waiting() int {
	d.door.mu.Lock()
	defer d.door.mu.Unlock()
	return len(d.door.waiting)
}

// Runners is how many batch runners the door runs.
func (d *Desk) Runners() int {
	d.door.mu.Lock()
	defer d.door.mu.Unlock()
	return d.door.runners
}

// MaxBatches bounds the door's batches in flight.
const MaxBatches = maxBatches
