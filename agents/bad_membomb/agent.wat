;; A deliberately bad agent: `tick` grows its linear memory by 1 MiB at a time and writes
;; into each new megabyte until the host refuses (memory.grow returns -1), then aborts the
;; way an allocator does on out-of-memory.
(component
  (core module $m
    (memory (export "mem") 1)
    (func (export "tick") (result i32)
      (local $old i32)
      (loop $more
        (local.set $old (memory.grow (i32.const 16)))
        (if (i32.eq (local.get $old) (i32.const -1))
          (then unreachable))
        (i32.store8 (i32.mul (local.get $old) (i32.const 65536)) (i32.const 1))
        (br $more))
      unreachable))
  (core instance $i (instantiate $m))
  (func (export "tick") (result (result (error string)))
    (canon lift (core func $i "tick") (memory (core memory $i "mem")))))
