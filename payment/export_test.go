package payment

// Waiting is how many asks wait for the door's next batch.
func (d *Desk) Waiting() int {
	d.door.mu.Lock()
	defer d.door.mu.Unlock()
	return len(d.door.waiting)
}

// Running reports whether the door's batch runner runs.
func (d *Desk) Running() bool {
	d.door.mu.Lock()
	defer d.door.mu.Unlock()
	return d.door.running
}
