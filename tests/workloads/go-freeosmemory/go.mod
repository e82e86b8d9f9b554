module slowpath/go-freeosmemory

go 1.21
