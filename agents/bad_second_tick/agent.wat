;; A deliberately broken release: its first tick works, every later one returns err.
;;
;; A node that judged a new version by its first tick alone would call it healthy and then watch
;; it crash-loop (each restart's first tick works again). The rollout probation tests upgrade to
;; it (issue 37 item 3). The count is a global of this instance: a restart begins again at its
;; good first tick. Return areas: ok at 0 (discriminant 0); err at 16 (discriminant 1, string
;; pointer 32, string length 55).
(component
  (core module $m
    (memory (export "mem") 1)
    (global $ticks (mut i32) (i32.const 0))
    (data (i32.const 16) "\01\00\00\00\20\00\00\00\37\00\00\00")
    (data (i32.const 32) "tick 2 or later of this instance: the release is broken")
    (func (export "tick") (result i32)
      (global.set $ticks (i32.add (global.get $ticks) (i32.const 1)))
      (select (i32.const 16) (i32.const 0) (i32.ge_u (global.get $ticks) (i32.const 2)))))
  (core instance $i (instantiate $m))
  (func (export "tick") (result (result (error string)))
    (canon lift (core func $i "tick") (memory (core memory $i "mem")))))
